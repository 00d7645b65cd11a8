"""`tying finetune SPEC --task mbpp|gsm8k|FILE.jsonl --out DIR`: a LoRA update of any model.

    result = finetune(FinetuneOptions(spec="smollm2", task="mbpp", out="runs/mbpp", max_steps=100))

The update is a run of the training loop (`tying.train.loop`): the same resume, optimizer
settings, step, progress bar and metrics.jsonl as `tying train`, with its own trainable
parameters, loss mask and data:

setup      -> options checked; the run session (`tying.train.session`, as for `tying train`)
              locks the output folder, refuses a used one without resume, finds the resume
              point; training examples read and tokenized, the base model loaded
              (`tying.loader.load_any`) and recorded (`tying.adapters.base_record`), all before
              anything is written
model      -> LoRA through peft (`tying.update.lora.add_lora`) on the transformers causal LM
              behind the model; the token interface frozen unless train_interface
optimizer  -> the training run's AdamW groups (`tying.train.optim.build_optimizers`) over the
              trainable tensors, linear warm-up then cosine decay (`OptimizerSettings`)
loop       -> `tying.train.loop.run_loop`, called by the session (restore, metrics,
              SIGINT/SIGTERM: a checkpoint of the current step, exit 130/143): one batch of examples per step (seeded order), loss =
              mean cross-entropy of the answer tokens (nats/token; prompt and padding masked
              with -100), gradient clipping, metrics.jsonl, checkpoints (atomic: adapter
              tensors, optimizer, RNG, data position), progress bar
end        -> the adapter (peft's save_pretrained: adapter_model.safetensors and
              adapter_config.json), tying_adapter.json (its base model), interface.safetensors
              (train_interface only) and finetune.json, all in DIR

A killed or interrupted run continued with `resume` repeats the losses and the final adapter of
an uninterrupted run exactly (same machine and thread count; tested with SIGKILL, SIGINT and
SIGTERM): the checkpoint
holds the adapter and interface tensors, AdamW's state, the torch random state (LoRA dropout)
and the position in the seeded example order.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tying.adapters import (
    ADAPTER_RECORD,
    INTERFACE_FILE,
    base_record,
    causal_lm_of,
    check_target_modules,
    default_target_modules,
    write_adapter_record,
)
from tying.config import ConfigError, from_dict, to_dict
from tying.devices import autocast_for, resolve_device, resolve_precision
from tying.errors import InvalidInputError
from tying.loader import load_any
from tying.options.finetune import FinetuneOptions as FinetuneOptions
from tying.outputs import write_text_atomic
from tying.train import checkpoint as ckpt
from tying.train.distributed import DistInfo
from tying.train.loop import LoopResult, LoopSettings, Run
from tying.train.optim import Optimizers, OptimizerSettings, build_optimizers
from tying.train.session import Prepared, RunFolder, RunSession
from tying.train.weights import ModelWeights
from tying.update.data import (
    IGNORE_INDEX,
    ExampleOrder,
    TokenizedSet,
    collate,
    load_examples,
    tokenize_examples,
)
from tying.update.lora import add_lora, trainable_parameters
from tying.update.token_rows import TokenRows, select_token_rows
from tying.update.tokens import first_added_id

#: Summary of a finished run, in the output folder.
SUMMARY_FILE = "finetune.json"
#: Prefix of the interface tensors in a checkpoint's model.safetensors.
INTERFACE_PREFIX = "interface."


#: Options a resumed run must keep (they fix the model, the data and their order).
RESUME_KEYS = (
    "spec",
    "task",
    "batch_size",
    "max_seq_len",
    "rank",
    "alpha",
    "dropout",
    "target_modules",
    "train_interface",
    "train_tokens",
    "append_eos",
    "seed",
)


@dataclass
class FinetuneResult:
    """What a finished run reports.

    Attributes:
        out: the output (adapter) folder.
        steps: the last step.
        final_loss: loss of the last step (nats per answer token).
        seconds_per_step: mean wall-clock seconds of the steps this process ran.
        summary: finetune.json.
    """

    out: Path
    steps: int
    final_loss: float
    seconds_per_step: float | None
    summary: dict[str, Any] = field(default_factory=dict)


def check_options(options: FinetuneOptions) -> None:
    """Validate the options that need no file or model (the optimizer's keys:
    `tying.train.optim.OptimizerSettings`).

    Raises:
        ValueError: what is wrong, in one line.
    """
    positive = {
        "batch_size": options.batch_size,
        "epochs": options.epochs,
        "rank": options.rank,
        "keep_last": options.keep_last,
    }
    for name, value in positive.items():
        if int(value) < 1:
            raise InvalidInputError(f"{name} must be >= 1, got {value}")
    if options.max_steps is not None and options.max_steps < 0:
        raise InvalidInputError(
            f"max_steps must be >= 0, got {options.max_steps}; leave it unset for `epochs` passes"
        )
    if options.max_seq_len < 2:
        raise InvalidInputError(f"max_seq_len must be >= 2 tokens, got {options.max_seq_len}")
    OptimizerSettings.of(options)
    if not options.alpha > 0:
        raise InvalidInputError(f"alpha must be > 0, got {options.alpha}")
    if not 0.0 <= options.dropout < 1.0:
        raise InvalidInputError(f"dropout must be in [0, 1), got {options.dropout}")
    if options.checkpoint_every < 0:
        raise InvalidInputError(f"checkpoint_every must be >= 0, got {options.checkpoint_every}")
    if options.target_modules is not None and not options.target_modules:
        raise InvalidInputError("target_modules needs at least one module name")
    resolve_precision(options.precision)


#: This module's log (the CLI formats it as "tying finetune: ..."); progress lines at INFO.
logger = logging.getLogger(__name__)


def run_folder(options: FinetuneOptions, out: Path) -> RunFolder:
    """The output folder for the run session: resume, and the settings a resume keeps
    (`RESUME_KEYS`)."""

    def check(state: dict[str, Any], found: Path) -> None:
        saved = from_dict(FinetuneOptions, state["options"], source=str(found / "trainer.json"))
        for key in RESUME_KEYS:
            if getattr(saved, key) != getattr(options, key):
                raise ConfigError(
                    f"cannot resume {out}: it was trained with {key}={getattr(saved, key)!r}, "
                    f"this run asks for {key}={getattr(options, key)!r}; resume with the same "
                    "setting, or choose another output folder"
                )

    return RunFolder(
        path=out,
        resume=options.resume,
        resume_option="--resume",
        check_saved=check,
        other_folder="another output folder",
    )


class ExampleBatches:
    """The finetune data as the loop's batches: `batch_size` examples per step in the seeded
    `ExampleOrder`, collated with the prompt and padding masked (-100).

    Args:
        data: the tokenized examples.
        order: their seeded order (its position is the checkpoint's "order").
        batch_size: examples per step.
        pad_id: the padding token of the inputs.
    """

    def __init__(
        self, data: TokenizedSet, order: ExampleOrder, batch_size: int, pad_id: int
    ) -> None:
        self.data, self.order, self.batch_size, self.pad_id = data, order, batch_size, pad_id

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        batch = [self.data.examples[i] for i in self.order.next_batch(self.batch_size)]
        return collate(batch, pad_id=self.pad_id)

    def state_dict(self) -> dict[str, int]:
        return self.order.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.order.load_state_dict(state)


class AdapterWeights(ModelWeights):
    """A LoRA run's checkpoint: the adapter tensors and the trained interface tensors only (not
    the base model), with the optimizer state of the training run's format.

    Args:
        model: the model holding the LoRA layers (the optimizer state's parameter names).
        optimizer: the run's optimizers.
        peft_model: peft's model (its adapter state dict).
        interface: the trained interface parameters by name.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: Optimizers,
        peft_model: Any,
        interface: dict[str, torch.nn.Parameter],
    ) -> None:
        super().__init__(model, optimizer)
        self.peft_model, self.interface = peft_model, interface

    def model_state(self) -> dict[str, torch.Tensor]:
        return _adapter_state(self.peft_model, self.interface)

    def load(self, model_state: dict[str, torch.Tensor], optimizer_state: dict[str, Any]) -> None:
        groups = optimizer_state.get("param_groups", [])
        if any(isinstance(p, int) for g in groups for p in g.get("params", [])):
            raise ConfigError(
                "this checkpoint was written by an older tying finetune, whose optimizer state "
                "cannot be resumed; start again in another output folder"
            )
        super().load(model_state, optimizer_state)

    def load_model(self, model_state: dict[str, torch.Tensor]) -> None:
        _load_adapter_state(self.peft_model, self.interface, model_state)


def _adapter_state(peft_model: Any, interface: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The trained tensors: peft's adapter state dict and the trained interface tensors."""
    from peft import get_peft_model_state_dict

    state = dict(get_peft_model_state_dict(peft_model))
    state.update({INTERFACE_PREFIX + n: p for n, p in interface.items()})
    return state


def _load_adapter_state(
    peft_model: Any, interface: dict[str, torch.nn.Parameter], state: dict[str, torch.Tensor]
) -> None:
    from peft import set_peft_model_state_dict

    lora = {k: v for k, v in state.items() if not k.startswith(INTERFACE_PREFIX)}
    result = set_peft_model_state_dict(peft_model, lora)
    missing = [k for k in getattr(result, "missing_keys", []) if "lora_" in k]
    if missing:
        raise InvalidInputError(
            f"the checkpoint lacks adapter tensor {missing[0]}: it is of another run"
        )
    with torch.no_grad():
        for name, parameter in interface.items():
            parameter.copy_(state[INTERFACE_PREFIX + name])


def _save_adapter(peft_model: Any, out: Path, interface: dict[str, torch.Tensor]) -> None:
    """peft's adapter files (and interface.safetensors) into `out`, each replaced atomically."""
    tmp = out / ".adapter.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        peft_model.save_pretrained(str(tmp))
        if interface:
            ckpt.save_tensors(dict(interface), tmp / INTERFACE_FILE)
        for path in tmp.iterdir():
            os.replace(path, out / path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    import json

    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


@dataclass
class _Update:
    """A LoRA update prepared by `_prepare` (nothing written yet).

    Attributes:
        loaded: the base model as loaded (its `model` now holds the LoRA layers).
        data: the tokenized training examples.
        peft_model: peft's model around the base's causal LM.
        record: the base model's record (`tying.adapters.base_record`).
        targets: the adapted module names.
        adapted: how many modules LoRA adapts.
        interface_names: the trained interface parameters' names.
        interface_params: those parameters by name.
        trainable: (name, parameter) of every trained tensor.
        device: where the model runs.
        precision: "bf16" or "fp32".
        max_steps: the run's steps.
        steps_per_epoch: steps of one pass over the examples.
    """

    loaded: Any
    data: TokenizedSet
    peft_model: Any
    record: dict[str, Any]
    targets: list[str]
    adapted: list[str]
    interface_names: list[str]
    interface_params: dict[str, torch.nn.Parameter]
    trainable: list[tuple[str, torch.nn.Parameter]]
    device: torch.device
    precision: str
    max_steps: int
    steps_per_epoch: int
    token_rows: TokenRows | None = None


def _prepare(options: FinetuneOptions) -> _Update:
    """Examples read and tokenized, the base model loaded, recorded and given its LoRA layers.

    Raises:
        ValueError / FileNotFoundError: see `finetune`.
    """
    examples = load_examples(options.task)
    device = resolve_device(options.device)
    precision = resolve_precision(options.precision, device)
    loaded = load_any(options.spec)
    if loaded.tokenizer is None:
        raise InvalidInputError(
            f"model {options.spec} has no tokenizer: save one beside it (tokenizer.json) or "
            "finetune a folder that has one"
        )
    tokenizer = loaded.tokenizer
    data = tokenize_examples(
        examples,
        tokenizer.encode,
        options.max_seq_len,
        tokenizer.eos_id if options.append_eos else None,
    )
    causal = causal_lm_of(loaded.model, eos_token_id=tokenizer.eos_id)
    record = base_record(causal, spec=options.spec, name=loaded.name, kind=loaded.kind)
    targets = list(options.target_modules or default_target_modules(loaded.model.blocks))
    adapted = check_target_modules(causal, targets)
    torch.manual_seed(options.seed)  # LoRA's A, then the dropout masks: from the seed alone
    peft_model, interface_names = add_lora(
        causal,
        targets,
        rank=options.rank,
        alpha=options.alpha,
        dropout=options.dropout,
        train_interface=options.train_interface,
    )
    from tying.adapters import interface_of

    token_rows = select_token_rows(
        interface_of(peft_model),
        options.train_tokens,
        first_added_id(options.spec) if options.train_tokens == "new" else None,
    )
    interface_names += [n for n in token_rows.names if n not in interface_names]
    peft_model.to(device)
    steps_per_epoch = math.ceil(len(data.examples) / options.batch_size)
    return _Update(
        loaded=loaded,
        data=data,
        peft_model=peft_model,
        record=record,
        targets=targets,
        adapted=adapted,
        interface_names=interface_names,
        interface_params=dict(_interface_params(peft_model, interface_names)),
        trainable=trainable_parameters(peft_model),
        device=device,
        precision=precision,
        max_steps=(
            options.max_steps if options.max_steps is not None else options.epochs * steps_per_epoch
        ),
        steps_per_epoch=steps_per_epoch,
        token_rows=token_rows,
    )


def _build_run(options: FinetuneOptions, update: _Update, out: Path) -> Run:
    """The update as a run of the training loop: LoRA (and interface) tensors trained by the
    training run's AdamW groups, the answer tokens' loss, the examples' batches."""
    model = update.loaded.model  # the Decoder / HFCausalLM, now holding the LoRA layers
    settings = OptimizerSettings.of(options)
    optimizer = build_optimizers(
        model, lr=settings.lr, weight_decay=settings.weight_decay, betas=settings.betas
    )
    order = ExampleOrder(len(update.data.examples), options.seed)
    trained = [p for _, p in update.trainable]
    if {id(p) for p in trained} != {id(p) for g in optimizer.param_groups for p in g["params"]}:
        raise RuntimeError("the optimizer's parameters are not the adapter's trainable tensors")
    if update.token_rows is not None and update.token_rows.fixes:
        for opt in optimizer:  # old token rows restored (PIT: Z re-projected) after every step
            opt.register_step_post_hook(lambda *_: update.token_rows.after_step())
    return Run(
        folder=out,
        info=DistInfo(rank=0, world_size=1, local_rank=0, device=update.device),
        forward=lambda inputs, targets: answer_loss(model, inputs, targets),
        module=update.peft_model,
        parameters=trained,
        optimizer=optimizer,
        batches=ExampleBatches(
            update.data, order, options.batch_size, update.loaded.tokenizer.eos_id
        ),
        weights=AdapterWeights(model, optimizer, update.peft_model, update.interface_params),
        vocab_size=model.interface.vocab_size,
        autocast=autocast_for(update.device, update.precision),
        ignore_index=IGNORE_INDEX,
        id_hint=": the tokenizer's ids do not fit this model's vocabulary",
        data_key="order",
        trainer_state=lambda: {"options": to_dict(options)},
        row_extras=lambda outcome: {"answer_tokens": outcome.tokens, "epoch": order.epochs_done},
    )


def finetune(options: FinetuneOptions) -> FinetuneResult:
    """Train a LoRA adapter of `options.spec` on `options.task` (see the module docstring).

    The output folder belongs to a run session (`tying.train.session`) for the whole run:
    locked, refused when used and not resumed, resumed from its newest intact checkpoint,
    checkpointed at SIGINT/SIGTERM. Progress lines go to this module's logger.

    Raises:
        ValueError / FileNotFoundError: bad options, a missing or malformed task file, an
            unknown task, a model without a tokenizer, a module name LoRA cannot adapt
            (nothing is written).
        ConfigError: a used `out` without resume; a resume with other model or data settings.
        RunFolderInUseError: another live process is running in `out`.
        DivergenceError: the loss became NaN or Inf (the last good checkpoint is kept).
        CheckpointWriteError: a checkpoint could not be written (the previous one is kept).
        RunInterrupted: SIGINT or SIGTERM (a checkpoint of the last step was written).
    """
    check_options(options)
    out = Path(options.out).expanduser()
    prepared: dict[str, _Update] = {}

    def prepare(resume_from: Path | None) -> Prepared:
        update = prepared["update"] = _prepare(options)
        run = _build_run(options, update, out)
        update.peft_model.train()
        return Prepared(
            run=run,
            settings=LoopSettings(
                max_steps=update.max_steps,
                optim=OptimizerSettings.of(options),
                checkpoint_every=options.checkpoint_every,
                keep_last=options.keep_last,
                tensorboard=options.tensorboard,
                progress="finetune" if options.progress else None,
            ),
            announce=_describe(options, update, sum(p.numel() for p in run.parameters)),
        )

    with RunSession(run_folder(options, out)) as session:
        result = session.run(prepare)
        # ---------------------------------------------------------------- the adapter
        update = prepared["update"]
        update.peft_model.eval()
        interface = {n: p.detach() for n, p in update.interface_params.items()}
        _save_adapter(update.peft_model, out, interface)
        n_trainable = sum(p.numel() for _, p in update.trainable)
        summary = _write_records(options, update, out, result, n_trainable)
    seconds = result.step_seconds
    per_step = sum(seconds) / len(seconds) if seconds else None
    return FinetuneResult(out, result.steps, result.final_loss, per_step, summary)


def _describe(options: FinetuneOptions, update: _Update, n_trainable: int) -> str:
    """The run's one line before its first step: model, LoRA, trainable tensors, data."""
    names = update.interface_names
    return (
        f"{update.loaded.name}: LoRA r={options.rank} on {len(update.adapted)} modules "
        f"({', '.join(update.targets)}), {n_trainable:,} trainable parameters"
        + (f" incl. interface {', '.join(names)}" if names else "")
        + f"; {len(update.data.examples)} examples, {update.max_steps} steps, {update.device}, "
        f"{update.precision}"
    )


def _write_records(
    options: FinetuneOptions, update: _Update, out: Path, result: LoopResult, n_trainable: int
) -> dict[str, Any]:
    """tying_adapter.json (the adapter's record of its base) and finetune.json (returned)."""
    import tying

    record_out = {
        "base": update.record,
        "lora": {
            "rank": options.rank,
            "alpha": options.alpha,
            "dropout": options.dropout,
            "target_modules": update.targets,
            "modules": len(update.adapted),
        },
        "train_interface": options.train_interface,
        "interface_tensors": update.interface_names,
        "task": options.task,
        "steps": result.steps,
        "tying_version": getattr(tying, "__version__", None),
    }
    write_adapter_record(out, record_out)
    seconds = result.step_seconds
    summary = {
        "options": to_dict(options),
        "base": update.record,
        "adapter": {"folder": str(out), "record": ADAPTER_RECORD, **record_out["lora"]},
        "interface_tensors": update.interface_names,
        "trainable_parameters": n_trainable,
        "data": {
            "task": options.task,
            **update.data.summary(),
            "steps_per_epoch": update.steps_per_epoch,
        },
        "steps": result.steps,
        "max_steps": update.max_steps,
        "answer_tokens_seen": result.tokens,
        "final_loss": result.final_loss if math.isfinite(result.final_loss) else None,
        "device": str(update.device),
        "precision": update.precision,
        "seconds": result.elapsed_s,
        "seconds_per_step": sum(seconds) / len(seconds) if seconds else None,
    }
    _write_json(out / SUMMARY_FILE, summary)
    return summary


def answer_loss(model: Any, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats/token) of the positions whose target is not -100.

    The head runs on those positions only (`interface.loss` of the selected final hidden
    states): the prompt positions cost the trunk, not the V-wide head. Architectures that
    soft-cap their logits go through the model's own loss (every position, same value).

    Args:
        model: a `Decoder` or `HFCausalLM` (`final_hidden`, `interface`).
        inputs: (B, T) token ids.
        targets: (B, T) next tokens, -100 where no loss is taken.
    """
    if getattr(model, "logit_softcap", None):
        return model(inputs, targets)
    hidden = model.final_hidden(inputs)
    keep = targets != -100
    return model.interface.loss(hidden[keep], targets[keep])


def _interface_params(peft_model: Any, names: list[str]) -> list[tuple[str, torch.nn.Parameter]]:
    """The trained interface parameters by attribute name (in `names` order)."""
    if not names:
        return []
    from tying.adapters import interface_of

    own = dict(interface_of(peft_model).named_parameters())
    return [(n, own[n]) for n in names]
