"""The training loop of `tying train`, in clearly marked sections.

setup      -> process group, run folder, config.yaml, resume point
data       -> tokenizer, token shards (cached), window sampler, validation store
model      -> decoder preset (scratch) or converted Hugging Face model (teacher),
              wrapped with a frozen teacher when the run distills (`distill` section)
optimizer  -> AdamW (+ PIT retraction hook, or a Stiefel RiemannianAdam for Z: train.optim),
              warm-up + cosine learning rate times each group's lr_scale
loop       -> micro-batches (gradient accumulation), clipping, step, metrics,
              validation, checkpoints; a non-finite loss stops the run before
              the weights are touched, keeping the last good checkpoint
"""

from __future__ import annotations

import math
import os
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tying.config import ConfigError, save_config, to_dict
from tying.devices import autocast_for, resolve_compile, resolve_precision
from tying.interface.loss import check_ids
from tying.train import checkpoint as ckpt
from tying.train.build import TrainingSetup, build_setup
from tying.train.config import TrainConfig, saved_train_config
from tying.train.distill import (
    DistillationObjective,
    add_student_prefix,
    load_teacher,
    rename_optimizer_state,
    strip_student_prefix,
)
from tying.train.distributed import (
    DistInfo,
    all_reduce_mean,
    cleanup,
    init_distributed,
    unwrap,
    wrap_model,
)
from tying.train.evaluate import evaluate
from tying.train.metrics import MetricsLogger
from tying.train.optim import Optimizers, optimizers_for_run
from tying.train.schedule import learning_rate


class DivergenceError(RuntimeError):
    """The loss became NaN or Inf; the run stopped before applying that step (exit status 1)."""

    exit_status = 1


@dataclass
class TrainResult:
    """What a finished run reports."""

    run_dir: Path
    steps: int
    tokens: int
    final_loss: float
    val_loss: float | None
    elapsed_s: float

    def summary(self) -> dict[str, Any]:
        """A JSON-able dict (non-finite losses as null)."""
        return {
            "run_dir": str(self.run_dir),
            "steps": self.steps,
            "tokens": self.tokens,
            "final_loss": self.final_loss if math.isfinite(self.final_loss) else None,
            "val_loss": self.val_loss,
            "elapsed_s": round(self.elapsed_s, 2),
        }


#: The hint of the host-side id check of every batch.
_SHARD_MISMATCH = (
    ": the token shards do not match this model (V={V}); tokenize the data with its tokenizer"
)


def to_device(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host batch on `device`: through pinned memory and an asynchronous copy on CUDA."""
    if device.type != "cuda":
        return batch.to(device)
    return batch.pin_memory().to(device, non_blocking=True)


def autocast_context(cfg: TrainConfig, device: torch.device) -> AbstractContextManager:
    """bf16 autocast on the run's device, or nothing for fp32 (`precision` "auto" resolved by
    `tying.devices.resolve_precision`)."""
    return autocast_for(device, cfg.precision)()


#: TrainConfig keys that fix the model and its interface: a resumed run must keep them.
MODEL_KEYS = (
    "preset",
    "model",
    "tie",
    "t_init",
    "pit_centre",
    "trainable_z",
    "pit_diag_activation",
    "input_grad_scale",
    "norm",
    "tokenizer",
    "t_scale",
)
#: The TrainConfig keys behind MODEL_KEYS' resolved properties (named in error messages).
_RESOLVED_KEYS = {"trainable_z": "pit_trainable_z", "t_scale": "pit_t_scale"}
#: TrainConfig keys that choose the optimizers whose state a checkpoint holds: a resumed run
#: must keep them too (the learning-rate keys, lr and the pit_*_lr_scale, may change).
OPTIMIZER_KEYS = ("pit_z_optimizer", "pit_t_optimizer")


def _model_settings(cfg: TrainConfig) -> dict[str, Any]:
    """The MODEL_KEYS values of a config (PIT's trainable Z resolved by mode)."""
    return {key: getattr(cfg, key) for key in MODEL_KEYS}


def check_resume_compatible(saved: TrainConfig, cfg: TrainConfig, where: Path) -> None:
    """Raise ConfigError naming the first model/interface or optimizer setting `cfg` changes
    from `saved` (MODEL_KEYS, OPTIMIZER_KEYS)."""
    old, new = _model_settings(saved), _model_settings(cfg)
    old |= {key: getattr(saved, key) for key in OPTIMIZER_KEYS}
    new |= {key: getattr(cfg, key) for key in OPTIMIZER_KEYS}
    for key in (*MODEL_KEYS, *OPTIMIZER_KEYS):
        if old[key] != new[key]:
            name = _RESOLVED_KEYS.get(key, key)
            raise ConfigError(
                f"cannot resume {where}: it was trained with {name}={old[key]!r}, this run asks "
                f"for {name}={new[key]!r}; resume with the same setting, or choose another out"
            )


def _resume_point(cfg: TrainConfig, log: Any) -> Path | None:
    """The newest good checkpoint to resume from (None: start), after checking the settings.

    Damaged or non-finite newer checkpoints are skipped with a message; a run folder with
    checkpoints and resume=false is refused (nothing is overwritten).
    """
    run_dir = Path(cfg.out)
    if not cfg.resume:
        if ckpt.list_checkpoints(run_dir):
            raise ConfigError(
                f"{run_dir} already holds checkpoints of a run: pass resume=true to continue "
                "it, or choose another out (nothing was overwritten)"
            )
        return None
    found = ckpt.checkpoint_to_resume(run_dir, log, "start again with resume=false in another out")
    if found is None:
        return None
    saved = saved_train_config(
        ckpt.read_trainer_state(found)["config"], source=str(found / "trainer.json")
    )
    check_resume_compatible(saved, cfg, run_dir)
    return found


def _distilling(model: nn.Module) -> bool:
    return isinstance(model, DistillationObjective)


def _model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Full (unsharded) model state on CPU; a collective under FSDP.

    Under distillation, the student's state alone, with its own parameter names.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    return strip_student_prefix(state) if _distilling(model) else state


def _optimizer_state(model: nn.Module, optimizer: Optimizers) -> dict[str, Any]:
    """Full state and parameter groups (lr_scale included) of every optimizer of the run."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    state = get_optimizer_state_dict(
        model,
        optimizer.optimizers,
        options=StateDictOptions(full_state_dict=True, cpu_offload=True),
    )
    if _distilling(model):
        state = rename_optimizer_state(state, lambda n: n.removeprefix("student."))
    return state


def _load_states(model: nn.Module, optimizer: Optimizers, path: Path) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    model_state, optim_state, trainer_state = ckpt.load_checkpoint(path)
    if _distilling(model):
        model_state = add_student_prefix(model_state)
        optim_state = rename_optimizer_state(optim_state, lambda n: "student." + n)
    options = StateDictOptions(full_state_dict=True)
    # Optimizer first: initialising its state runs a zero-lr step, which a Riemannian
    # optimizer ends with a retraction (a rounding-level change of Z); the model's
    # weights are loaded after it, so they are exactly the saved ones.
    set_optimizer_state_dict(model, optimizer.optimizers, optim_state, options=options)
    set_model_state_dict(model, model_state, options=options)
    ckpt.restore_rng(path)
    return trainer_state


def _record_conversion(model: nn.Module, run_dir: Path, logger: MetricsLogger) -> None:
    """Teacher mode: conversion.json (the ConversionReport) and a step-0 row with its KL."""
    import json

    hf_model = getattr(model, "hf_model", None)
    if hf_model is None:
        return
    from tying.hf import conversion_report

    report = conversion_report(hf_model)
    if report is None:
        return
    (run_dir / "conversion.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    if report.step0 is not None:
        logger.log(
            {
                "step": 0,
                "tokens": 0,
                "step0_kl": report.step0["kl"],
                "step0_loss": report.step0["loss"],
                "step0_teacher_loss": report.step0["teacher_loss"],
            }
        )


def train(cfg: TrainConfig, setup: TrainingSetup | None = None) -> TrainResult:
    """Run (or resume) one training run as configured; returns its summary.

    Raises:
        DivergenceError: the loss became non-finite (the last good checkpoint is kept).
        ConfigError: inconsistent settings (batch sizes, existing run folder, ...).
    """
    # ------------------------------------------------------------------ setup
    info = init_distributed()
    deterministic_before = torch.are_deterministic_algorithms_enabled()
    try:
        return _train(cfg, info, setup)
    finally:
        torch.use_deterministic_algorithms(deterministic_before)
        cleanup(info)


def _log(message: str) -> None:
    print(f"tying train: {message}", file=sys.stderr, flush=True)


def _train(cfg: TrainConfig, info: DistInfo, setup: TrainingSetup | None) -> TrainResult:
    accum = cfg.grad_accum_steps(info.world_size)
    run_dir = Path(cfg.out)
    resume_from = _resume_point(cfg, _log if info.is_main else lambda _: None)

    # ------------------------------------------------------------------ data + model
    torch.manual_seed(cfg.seed)
    if cfg.deterministic:
        if info.device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    setup = setup or build_setup(cfg, info, calibrate=resume_from is None)
    if info.is_main:  # written only now: the data, tokenizer and model were built without error
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
    model = setup.model.to(info.device)
    interface = unwrap(model).interface
    sampler = setup.sampler

    objective: nn.Module = model
    if cfg.distill.enabled:
        teacher = load_teacher(cfg.distill, cfg.model).to(info.device)
        objective = DistillationObjective(
            model,
            teacher,
            cfg.distill.alpha,
            cfg.distill.temperature,
            teacher_autocast=resolve_precision(cfg.precision, info.device) == "bf16",
        )

    # ------------------------------------------------------------------ optimizer
    wrapped = wrap_model(objective, info, cfg.distributed)
    # the student's parameters only (a distilling objective also holds the frozen teacher)
    optimizer = optimizers_for_run(model, cfg)
    compiled = resolve_compile(cfg.compile, info.device, hooks=cfg.track_gradient_paths)
    step_model = torch.compile(wrapped) if compiled else wrapped
    vocab_size = interface.vocab_size

    start_step, tokens_seen, elapsed_before = 0, 0, 0.0
    if resume_from is not None:
        lr_scales = optimizer.lr_scales()
        state = _load_states(unwrap(wrapped), optimizer, resume_from)
        optimizer.set_lr_scales(lr_scales)  # this run's, like lr: a resume may change them
        start_step, tokens_seen = state["step"], state["tokens"]
        elapsed_before = state.get("elapsed_s", 0.0)
        sampler.load_state_dict(state["sampler"])
        if info.is_main:
            _log(f"resuming from step {start_step} ({resume_from})")
    # After loading: restoring optimizer state runs a zero-lr step, which must not retract Z.
    # A Riemannian optimizer retracts Z itself; AdamW needs the hook.
    if getattr(interface, "trainable_z", False) and cfg.pit_z_optimizer == "adamw":
        interface.attach_retraction(optimizer.optimizer_of(interface.z))
    logger = (
        MetricsLogger(
            run_dir, resume_step=start_step if resume_from else None, tensorboard=cfg.tensorboard
        )
        if info.is_main
        else None
    )
    tracker = setup.make_tracker(interface) if cfg.track_gradient_paths else None
    if logger is not None and resume_from is None:
        _record_conversion(model, run_dir, logger)

    def save(step: int) -> None:
        model_state = _model_state(unwrap(wrapped))
        bad = ckpt.nonfinite_tensors(model_state)
        if bad:  # never write a poisoned checkpoint that a resume would trust
            last, _ = ckpt.latest_good_checkpoint(run_dir)
            raise DivergenceError(
                f"the weights became non-finite at step {step} ({bad[0]}); no checkpoint was "
                "written. "
                + (f"Last good checkpoint: {last}." if last else "No checkpoint was written yet.")
                + " Lower lr or use precision=fp32, then resume=true."
            )
        optim_state = _optimizer_state(unwrap(wrapped), optimizer)
        if info.is_main:
            trainer_state = {
                "tokens": tokens_seen,
                "elapsed_s": elapsed_before + (time.perf_counter() - t_start),
                "sampler": sampler.state_dict(),
                "config": to_dict(cfg),
            }
            path = ckpt.save_checkpoint(
                run_dir, step, model_state, optim_state, trainer_state, cfg.keep_last
            )
            save_config(cfg, path / "config.yaml")

    def validate(step: int) -> float | None:
        if setup.val_store is None:
            return None
        result = evaluate(
            wrapped,  # eager: a compiled model would compile its eval-mode graph once more
            setup.val_store,
            seq_len=cfg.seq_len,
            batch_size=cfg.micro_batch_size,
            max_tokens=cfg.eval_tokens,
            autocast=lambda: autocast_context(cfg, info.device),
            device=info.device,
        )
        if logger is not None:
            logger.log(
                {
                    "step": step,
                    "tokens": tokens_seen,
                    "val_loss": result["loss"],
                    "val_ppl": result["ppl"],
                }
            )
        return result["loss"]

    # ------------------------------------------------------------------ loop
    progress = None
    if info.is_main and cfg.progress:
        from tqdm.auto import tqdm

        progress = tqdm(
            total=cfg.max_steps, initial=start_step, desc=f"train {cfg.tie}", unit="step"
        )
    t_start = time.perf_counter()
    last_loss, val_loss = float("nan"), None
    step = start_step
    try:
        for step in range(start_step + 1, cfg.max_steps + 1):
            t0 = time.perf_counter()
            lr = learning_rate(
                step,
                lr=cfg.lr,
                warmup_steps=cfg.warmup_steps,
                max_steps=cfg.max_steps,
                min_lr_ratio=cfg.min_lr_ratio,
            )
            optimizer.set_lr(lr)
            if tracker is not None:
                tracker.start_step()
            loss_sum = torch.zeros((), device=info.device)
            parts_sum = torch.zeros(2, device=info.device)
            for micro in range(accum):
                inputs, targets = sampler.next_batch()
                for ids in (inputs, targets):  # on the host: no sync in the forward
                    check_ids(ids, vocab_size, "token id", _SHARD_MISMATCH.format(V=vocab_size))
                inputs, targets = to_device(inputs, info.device), to_device(targets, info.device)
                sync = micro == accum - 1 or not (info.enabled and cfg.distributed == "ddp")
                with (
                    nullcontext() if sync else wrapped.no_sync(),
                    autocast_context(cfg, info.device),
                ):
                    out = step_model(inputs, targets)
                if cfg.distill.enabled:
                    loss, ce, kl = out
                    parts_sum += torch.stack([ce.detach().float(), kl.detach().float()])
                else:
                    loss = out
                (loss / accum).backward()
                loss_sum += loss.detach().float()
            extra = tracker.finish_step() if tracker is not None else {}
            max_norm = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
            norm = torch.nn.utils.clip_grad_norm_(unwrap(wrapped).parameters(), max_norm)
            if hasattr(norm, "full_tensor"):  # FSDP2: a DTensor (the global norm on every rank)
                norm = norm.full_tensor()
            # The step's one host sync: loss, gradient norm and (distilling) CE and KL together.
            means = all_reduce_mean(
                torch.cat([(loss_sum / accum).reshape(1), parts_sum / accum]), info
            )
            step_loss, ce_mean, kl_mean, grad_norm = torch.cat(
                [means, norm.detach().float().reshape(1).to(means.device)]
            ).tolist()
            extra_parts = {"ce": ce_mean, "kl": kl_mean} if cfg.distill.enabled else {}
            if not math.isfinite(step_loss):
                optimizer.zero_grad(set_to_none=True)
                last, _ = ckpt.latest_good_checkpoint(run_dir)
                if logger is not None:
                    logger.log({"step": step, "event": "diverged", "loss": step_loss})
                raise DivergenceError(
                    f"the loss became {step_loss} at step {step}; the weights were not updated. "
                    + (
                        f"Last good checkpoint: {last}."
                        if last
                        else "No checkpoint was written yet."
                    )
                    + " Lower lr, raise warmup_steps, or use precision=fp32, then resume=true."
                )
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            tokens_seen += cfg.global_batch_tokens
            dt = time.perf_counter() - t0
            last_loss = step_loss
            if logger is not None:
                logger.log(
                    {
                        "step": step,
                        "tokens": tokens_seen,
                        "loss": step_loss,
                        "lr": lr,
                        "grad_norm": grad_norm,
                        "tokens_per_s": cfg.global_batch_tokens / dt,
                        "elapsed_s": elapsed_before + time.perf_counter() - t_start,
                        **extra_parts,
                        **extra,
                    }
                )
            if progress is not None:
                progress.update(1)
                progress.set_postfix(loss=f"{step_loss:.3f}", lr=f"{lr:.2e}")
            final = step == cfg.max_steps
            if (cfg.eval_every and step % cfg.eval_every == 0) or final:
                val_loss = validate(step)
            if (cfg.checkpoint_every and step % cfg.checkpoint_every == 0) or final:
                save(step)
    finally:
        if progress is not None:
            progress.close()
        if logger is not None:
            logger.close()
        if tracker is not None:
            tracker.close()
    return TrainResult(
        run_dir=run_dir,
        steps=step,
        tokens=tokens_seen,
        final_loss=last_loss,
        val_loss=val_loss,
        elapsed_s=elapsed_before + time.perf_counter() - t_start,
    )
