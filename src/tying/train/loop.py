"""The one training loop: `tying train` and `tying finetune` both run it.

A verb describes its run as a `Run`: the model's step function, the trainable parameters (in
its `Optimizers`), the batches and their loss mask, how its weights are saved (the whole model,
or the adapter only), what else its checkpoints hold, and an optional validation. The verbs'
modules build it: `tying.train.run` (a training run: scratch or teacher, distillation,
DDP/FSDP2) and `tying.update.finetune` (a LoRA update). Everything else happens here, the same
way for both:

resume     -> `restore`: optimizer state, then the weights, the random state, the data
              position, the step and token counters
step       -> `train_step`: micro-batches (`micro_step`: ids checked on the host against the
              vocabulary among the positions that carry a loss, pinned non-blocking copies on
              CUDA, DDP's no_sync but on the last), clipping, ONE host sync (loss, gradient
              norm, the loss's parts and the stop flag together, before the optimizer step), a
              non-finite loss stops the run before the weights are touched (`DivergenceError`)
log        -> `log_step`: one metrics.jsonl row (TensorBoard mirrors it) and the progress bar
validate   -> the run's own validation, every `eval_every` steps and at the end
checkpoint -> `save`: atomic (`tying.train.checkpoint`), refused for non-finite weights
stop       -> `should_stop` (the session's interrupt flag), read in each step's one host sync
              (reduced over the process group): a checkpoint of that step (unless one was just
              written), then the loop returns early

The run folder, its lock, the resume point, metrics.jsonl and the signals belong to the run
session (`tying.train.session`), which calls this loop for `tying train` and `tying finetune`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from tying.interface.token_ids import check_ids
from tying.train import checkpoint as ckpt
from tying.train.distributed import DistInfo, all_reduce_mean
from tying.train.metrics import MetricsLogger
from tying.train.optim import Optimizers, OptimizerSettings

#: Old names of this module that moved to `tying.train.run` (served with a DeprecationWarning).
_MOVED_TO_RUN = (
    "train",
    "TrainResult",
    "MODEL_KEYS",
    "check_resume_compatible",
    "autocast_context",
)


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_RUN:
        from tying._compat import moved_attribute

        return moved_attribute(__name__, name, "tying.train.run")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class DivergenceError(RuntimeError):
    """The loss became NaN or Inf; the run stopped before applying that step (exit status 1)."""

    exit_status = 1


def to_device(batch: Tensor, device: torch.device) -> Tensor:
    """A host batch on `device`: through pinned memory and an asynchronous copy on CUDA."""
    if device.type != "cuda":
        return batch.to(device)
    return batch.pin_memory().to(device, non_blocking=True)


class Batches(Protocol):
    """A resumable source of host micro-batches (`WindowSampler`, the finetune examples)."""

    def next_batch(self) -> tuple[Tensor, Tensor]:
        """(inputs, targets), both (B, T) token ids on the host."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The position in the data, for a checkpoint."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint's position."""
        ...


class RunWeights(Protocol):
    """How a run's weights and optimizer state go into a checkpoint and come back."""

    def model_state(self) -> dict[str, Tensor]:
        """The tensors a checkpoint holds (model.safetensors), on the CPU; every rank calls it
        (a collective under FSDP)."""
        ...

    def optimizer_state(self) -> dict[str, Any]:
        """The optimizers' state and parameter groups (optimizer.pt); every rank calls it."""
        ...

    def load(self, model_state: dict[str, Tensor], optimizer_state: dict[str, Any]) -> None:
        """Restore both (the optimizer first, then the weights: they stay exactly the saved)."""
        ...


@dataclass
class Run:
    """What a verb gives the loop (see the module docstring).

    Attributes:
        folder: the run folder (metrics.jsonl, checkpoints/).
        info: this process's place in the process group.
        forward: the step model, called as `forward(inputs, targets)` on (B, T) device ids under
            `autocast`: the mean loss (nats per loss token), or (loss, *parts) with the parts
            named by `loss_parts`. Compiled or eager, wrapped (DDP) or not.
        module: the module `forward` runs (DDP's `no_sync` is taken from it).
        parameters: the parameters whose gradients are clipped (those the optimizer trains).
        optimizer: the optimizers of the trainable parameters.
        batches: this process's micro-batches.
        weights: how weights and optimizer state are saved and restored.
        vocab_size: V: every id (among the positions that carry a loss) must be below it.
        autocast: factory of the precision context of a forward pass.
        ignore_index: target label of positions without a loss (the loss mask), or None.
        id_hint: appended to the message of an out-of-vocabulary id.
        loss_parts: names of the parts `forward` returns after the loss (e.g. "ce", "kl").
        ddp_no_sync: skip DDP's gradient all-reduce on every micro-batch but the last.
        data_key: trainer.json key of the data position.
        trainer_state: more trainer.json entries (the run's configuration).
        validate: held-out metrics of the current weights ({"val_loss", ...}), or None.
        tracker: a gradient-path tracker (`start_step`, `finish_step() -> dict`, `close`).
        checkpoint_files: writes the run's own files into a checkpoint's temporary folder
            (rank 0; part of the atomic write, e.g. config.yaml).
        on_checkpoint: called with each checkpoint folder written (rank 0).
        row_extras: more metrics.jsonl entries of a step, from its `StepOutcome`.
    """

    folder: Path
    info: DistInfo
    forward: Callable[[Tensor, Tensor], Any]
    module: nn.Module
    parameters: list[Tensor]
    optimizer: Optimizers
    batches: Batches
    weights: RunWeights
    vocab_size: int
    autocast: Callable[[], AbstractContextManager]
    ignore_index: int | None = None
    id_hint: str = ""
    loss_parts: tuple[str, ...] = ()
    ddp_no_sync: bool = False
    data_key: str = "sampler"
    trainer_state: Callable[[], dict[str, Any]] = dict
    validate: Callable[[], dict[str, float]] | None = None
    tracker: Any = None
    checkpoint_files: Callable[[Path], None] | None = None
    on_checkpoint: Callable[[Path], None] | None = None
    row_extras: Callable[[StepOutcome], dict[str, Any]] | None = None


@dataclass
class LoopSettings:
    """How long the loop runs and what it does between steps.

    Attributes:
        max_steps: the last optimizer step.
        optim: the optimizer and schedule (`OptimizerSettings`).
        accum: micro-batches per optimizer step per process.
        eval_every: steps between validations (0: only at the end); with `Run.validate`.
        checkpoint_every: steps between checkpoints (0: only at the end).
        keep_last: checkpoints kept.
        tensorboard: also write TensorBoard event files.
        progress: the progress bar's label, or None for no bar.
    """

    max_steps: int
    optim: OptimizerSettings
    accum: int = 1
    eval_every: int = 0
    checkpoint_every: int = 0
    keep_last: int = 2
    tensorboard: bool = False
    progress: str | None = None


@dataclass
class LoopState:
    """Where a run stands: the last step done, target tokens seen, seconds spent before this
    process started (a resumed run's earlier part)."""

    step: int = 0
    tokens: int = 0
    elapsed_before: float = 0.0


@dataclass
class StepOutcome:
    """One optimizer step, read back to the host in the step's one sync.

    Attributes:
        loss: mean loss over the global batch (nats per loss token).
        grad_norm: global gradient norm before clipping.
        parts: the loss's named parts (e.g. {"ce", "kl"}), means over the global batch.
        tokens: target tokens that carried the loss, over all processes.
        extra: the gradient-path tracker's metrics of the step.
        stop: some process asked to stop (`train_step`'s `stop`).
    """

    loss: float
    grad_norm: float
    parts: dict[str, float] = field(default_factory=dict)
    tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    stop: bool = False


@dataclass
class LoopResult:
    """What the loop reports.

    Attributes:
        steps: the last step done.
        tokens: target tokens seen by the whole run.
        final_loss: loss of the last step (nan when no step ran).
        val_loss: the last validation loss (None: none ran).
        elapsed_s: seconds of the whole run (a resumed run's earlier part included).
        step_seconds: wall-clock seconds of each step this process ran.
        stopped: `should_stop` ended the loop before `max_steps`.
        checkpoint: the checkpoint of the last step when the loop stopped early (rank 0),
            else None.
    """

    steps: int
    tokens: int
    final_loss: float
    val_loss: float | None
    elapsed_s: float
    step_seconds: list[float]
    stopped: bool = False
    checkpoint: Path | None = None


# ----------------------------------------------------------------------------- resume
def restore(run: Run, path: Path) -> LoopState:
    """Load checkpoint `path` into the run: optimizer state, weights, random state, data position.

    The optimizer's lr_scales are this run's (like lr, a resume may change them), not the
    checkpoint's.
    """
    lr_scales = run.optimizer.lr_scales()
    model_state, optimizer_state, trainer_state = ckpt.load_checkpoint(path)
    run.weights.load(model_state, optimizer_state)
    run.optimizer.set_lr_scales(lr_scales)
    ckpt.restore_rng(path)
    run.batches.load_state_dict(trainer_state[run.data_key])
    # "answer_tokens": the name of the count in the checkpoints of tying 0.2.0's finetune
    tokens = trainer_state.get("tokens", trainer_state.get("answer_tokens", 0))
    return LoopState(
        step=int(trainer_state["step"]),
        tokens=int(tokens),
        elapsed_before=float(trainer_state.get("elapsed_s", 0.0)),
    )


def metrics_logger(run: Run, settings: LoopSettings, resumed: LoopState | None) -> MetricsLogger:
    """metrics.jsonl of the run (rows after a resumed checkpoint's step dropped)."""
    return MetricsLogger(
        run.folder,
        resume_step=resumed.step if resumed is not None else None,
        tensorboard=settings.tensorboard,
    )


# ----------------------------------------------------------------------------- step
def micro_step(
    run: Run, inputs: Tensor, targets: Tensor, accum: int, sync: bool
) -> tuple[Tensor, list[Tensor]]:
    """Forward and backward of one micro-batch; returns the detached (loss, parts) on the device.

    Ids are checked on the host (no sync in the forward), then copied (pinned, non-blocking
    on CUDA). The gradient is that of loss / `accum`; `sync` False skips DDP's all-reduce.
    """
    valid = None if run.ignore_index is None else targets != run.ignore_index
    check_ids(inputs, run.vocab_size, "token id", run.id_hint)
    check_ids(targets, run.vocab_size, "token id", run.id_hint, valid=valid)
    device = run.info.device
    inputs, targets = to_device(inputs, device), to_device(targets, device)
    no_sync = run.module.no_sync() if run.ddp_no_sync and not sync else nullcontext()
    with no_sync, run.autocast():
        out = run.forward(inputs, targets)
    loss, *parts = out if isinstance(out, tuple) else (out,)
    (loss / accum).backward()
    return loss.detach().float(), [p.detach().float() for p in parts]


def _loss_tokens(targets: Tensor, ignore_index: int | None) -> int:
    """Positions of a host batch that carry a loss."""
    return targets.numel() if ignore_index is None else int((targets != ignore_index).sum())


def train_step(
    run: Run, settings: LoopSettings, step: int, stop: Callable[[], bool] | None = None
) -> StepOutcome:
    """One optimizer step: micro-batches, clipping, the step's one host sync, the update.

    `stop` (a process's own stop request, e.g. its signal flag) is read before the sync and
    reduced with the loss: `StepOutcome.stop` is True on every rank when any rank asked.

    Raises:
        DivergenceError: the loss is NaN or Inf (the weights were not updated; the gradients
            are dropped).
    """
    device, accum = run.info.device, settings.accum
    if run.tracker is not None:
        run.tracker.start_step()
    loss_sum = torch.zeros((), device=device)
    parts_sum = torch.zeros(len(run.loss_parts), device=device)
    tokens = 0
    for micro in range(accum):
        inputs, targets = run.batches.next_batch()
        tokens += _loss_tokens(targets, run.ignore_index)
        loss, parts = micro_step(run, inputs, targets, accum, sync=micro == accum - 1)
        loss_sum += loss
        if parts:
            parts_sum += torch.stack(parts)
    extra = run.tracker.finish_step() if run.tracker is not None else {}
    norm = torch.nn.utils.clip_grad_norm_(run.parameters, settings.optim.max_norm)
    if hasattr(norm, "full_tensor"):  # FSDP2: a DTensor (the global norm on every rank)
        norm = norm.full_tensor()
    # The step's one host sync: loss, gradient norm, the loss's parts (and stop flag) together.
    reduced = [(loss_sum / accum).reshape(1), parts_sum / accum]
    if stop is not None:
        reduced.append(torch.full((1,), float(stop()), device=device))
    means = all_reduce_mean(torch.cat(reduced), run.info)
    values = torch.cat([means, norm.detach().float().reshape(1).to(means.device)]).tolist()
    loss_value, *part_values, grad_norm = values
    stop_value = part_values.pop() if stop is not None else 0.0
    if not math.isfinite(loss_value):
        run.optimizer.zero_grad(set_to_none=True)
        raise _NonFiniteLossError(loss_value)
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    return StepOutcome(
        loss=loss_value,
        grad_norm=grad_norm,
        parts=dict(zip(run.loss_parts, part_values, strict=True)),
        tokens=tokens * run.info.world_size,
        extra=extra,
        stop=stop_value > 0,
    )


class _NonFiniteLossError(Exception):
    """train_step's signal to the loop: the step's loss was not finite."""

    def __init__(self, loss: float) -> None:
        super().__init__(loss)
        self.loss = loss


def _last_good(run: Run) -> str:
    last, _ = ckpt.latest_good_checkpoint(run.folder)
    return f"Last good checkpoint: {last}." if last else "No checkpoint was written yet."


def divergence(run: Run, step: int, loss: float, logger: MetricsLogger | None) -> DivergenceError:
    """The error of a non-finite loss at `step` (logged as {"event": "diverged"})."""
    if logger is not None:
        logger.log({"step": step, "event": "diverged", "loss": loss})
    return DivergenceError(
        f"the loss became {loss} at step {step}; the weights were not updated. {_last_good(run)}"
        " Lower lr, raise warmup_steps, or use precision=fp32, then resume."
    )


# ----------------------------------------------------------------------------- log
def log_step(
    run: Run,
    logger: MetricsLogger | None,
    progress: Any,
    step: int,
    lr: float,
    outcome: StepOutcome,
    totals: LoopState,
    seconds: float,
    elapsed: float,
) -> None:
    """One metrics.jsonl row of a step (rank 0) and the progress bar's update."""
    if logger is not None:
        logger.log(
            {
                "step": step,
                "tokens": totals.tokens,
                "loss": outcome.loss,
                "lr": lr,
                "grad_norm": outcome.grad_norm,
                "tokens_per_s": outcome.tokens / seconds,
                "step_s": seconds,
                "elapsed_s": elapsed,
                **outcome.parts,
                **outcome.extra,
                **(run.row_extras(outcome) if run.row_extras is not None else {}),
            }
        )
    if progress is not None:
        progress.update(1)
        progress.set_postfix(loss=f"{outcome.loss:.3f}", lr=f"{lr:.2e}")


@contextmanager
def progress_bar(settings: LoopSettings, start: int, main: bool) -> Iterator[Any]:
    """A tqdm bar over the steps (rank 0, when `settings.progress` names one), closed after."""
    bar = None
    if main and settings.progress is not None:
        from tqdm.auto import tqdm

        bar = tqdm(total=settings.max_steps, initial=start, desc=settings.progress, unit="step")
    try:
        yield bar
    finally:
        if bar is not None:
            bar.close()


# ----------------------------------------------------------------------------- checkpoint
def save(
    run: Run, settings: LoopSettings, step: int, totals: LoopState, elapsed: float
) -> Path | None:
    """Checkpoint `step` (every rank gathers the state, rank 0 writes it); its folder (rank 0).

    Raises:
        DivergenceError: the weights hold NaN or Inf (nothing is written: a resume would trust it).
        CheckpointWriteError: a full disk or another write failure (the previous checkpoint
            is intact).
    """
    model_state = run.weights.model_state()
    bad = ckpt.nonfinite_tensors(model_state)
    if bad:
        raise DivergenceError(
            f"the weights became non-finite at step {step} ({bad[0]}); no checkpoint was "
            f"written. {_last_good(run)} Lower lr or use precision=fp32, then resume."
        )
    optimizer_state = run.weights.optimizer_state()
    if not run.info.is_main:
        return None
    trainer_state = {
        "tokens": totals.tokens,
        "elapsed_s": elapsed,
        run.data_key: run.batches.state_dict(),
        **run.trainer_state(),
    }
    path = ckpt.save_checkpoint(
        run.folder,
        step,
        model_state,
        optimizer_state,
        trainer_state,
        settings.keep_last,
        extra_files=run.checkpoint_files,
    )
    if run.on_checkpoint is not None:
        run.on_checkpoint(path)
    return path


def _due(step: int, every: int, final: bool) -> bool:
    return final or bool(every and step % every == 0)


def validate(run: Run, logger: MetricsLogger | None, step: int, tokens: int) -> float | None:
    """The run's validation, logged as a row of its own; its `val_loss` (None: no validation)."""
    if run.validate is None:
        return None
    result = run.validate()
    if logger is not None:
        logger.log({"step": step, "tokens": tokens, **result})
    return result.get("val_loss")


# ----------------------------------------------------------------------------- loop
def run_loop(
    run: Run,
    settings: LoopSettings,
    start: LoopState,
    logger: MetricsLogger | None,
    should_stop: Callable[[], bool] | None = None,
) -> LoopResult:
    """Steps `start.step + 1` to `settings.max_steps` (see the module docstring).

    Args:
        run: the verb's run.
        settings: steps, schedule, validation and checkpoint cadence.
        start: where the run stands (after `restore`, or a fresh `LoopState`).
        logger: metrics.jsonl (rank 0; None on the other ranks); closed at the end.
        should_stop: this process's stop request, read in every step's one host sync (and
            reduced over the process group there); when any process asked during a step but
            the last, the loop checkpoints that step (unless it was just written) and returns
            with `stopped` set.

    Raises:
        DivergenceError: a non-finite loss (the weights were not updated) or non-finite weights
            at a checkpoint; the last good checkpoint is kept.
    """
    totals = LoopState(start.step, start.tokens, start.elapsed_before)
    t_start = time.perf_counter()
    last_loss, val_loss, step_seconds = float("nan"), None, []
    stopped, written = False, None

    def elapsed() -> float:
        return start.elapsed_before + time.perf_counter() - t_start

    try:
        with progress_bar(settings, start.step, run.info.is_main) as bar:
            for step in range(start.step + 1, settings.max_steps + 1):
                t0 = time.perf_counter()
                lr = settings.optim.lr_at(step, settings.max_steps)
                run.optimizer.set_lr(lr)
                try:
                    outcome = train_step(run, settings, step, should_stop)
                except _NonFiniteLossError as e:
                    raise divergence(run, step, e.loss, logger) from None
                totals.step, totals.tokens = step, totals.tokens + outcome.tokens
                seconds = time.perf_counter() - t0
                step_seconds.append(seconds)
                last_loss = outcome.loss
                log_step(run, logger, bar, step, lr, outcome, totals, seconds, elapsed())
                final = step == settings.max_steps
                if run.validate is not None and _due(step, settings.eval_every, final):
                    val_loss = validate(run, logger, step, totals.tokens)
                saved = _due(step, settings.checkpoint_every, final)
                if saved:
                    written = save(run, settings, step, totals, elapsed())
                if outcome.stop and not final:
                    if not saved:
                        written = save(run, settings, step, totals, elapsed())
                    stopped = True
                    break
    finally:
        if logger is not None:
            logger.close()
        if run.tracker is not None:
            run.tracker.close()
    return LoopResult(
        steps=totals.step,
        tokens=totals.tokens,
        final_loss=last_loss,
        val_loss=val_loss,
        elapsed_s=elapsed(),
        step_seconds=step_seconds,
        stopped=stopped,
        checkpoint=written if stopped else None,
    )


def parameters_of(modules: Iterable[nn.Module]) -> list[Tensor]:
    """Every parameter of `modules`, each once, in order."""
    seen: dict[int, Tensor] = {}
    for module in modules:
        for p in module.parameters():
            seen.setdefault(id(p), p)
    return list(seen.values())
