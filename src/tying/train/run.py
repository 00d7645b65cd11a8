"""`tying train`: a training run as a `tying.train.loop.Run`, in clearly marked sections.

folder     -> process group; the run session (`tying.train.session`): the folder's lock, its
              used-folder policy, the resume point, restore, metrics, interrupts (SIGINT/SIGTERM
              checkpoint the current step)
data       -> tokenizer, token shards (cached), window sampler, validation store
model      -> decoder preset (scratch) or converted Hugging Face model (teacher),
              wrapped with a frozen teacher when the run distills (`distill` section)
optimizer  -> AdamW (+ PIT retraction hook, or a Stiefel RiemannianAdam for Z: train.optim),
              warm-up + cosine learning rate times each group's lr_scale
loop       -> `tying.train.loop.run_loop` (called by the session): micro-batches (gradient accumulation), clipping,
              step, metrics, validation, checkpoints; a non-finite loss stops the run before
              the weights are touched, keeping the last good checkpoint
"""

from __future__ import annotations

import json
import logging
import math
import os
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tying.config import ConfigError, save_config, to_dict
from tying.devices import autocast_for, resolve_compile, resolve_precision
from tying.train.build import TrainingSetup, build_setup
from tying.train.config import TrainConfig, saved_train_config
from tying.train.distill import (
    DistillationObjective,
    add_student_prefix,
    load_teacher,
    rename_optimizer_state,
    strip_student_prefix,
)
from tying.train.distributed import DistInfo, cleanup, init_distributed, unwrap, wrap_model
from tying.train.evaluate import evaluate
from tying.train.loop import LoopSettings, Run
from tying.train.metrics import MetricsLogger
from tying.train.optim import (
    OptimizerSettings,
    attach_retraction_for_run,
    optimizers_for_run,
)
from tying.train.session import Prepared, RunFolder, RunSession
from tying.train.weights import ModelWeights


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


def autocast_context(cfg: TrainConfig, device: torch.device) -> AbstractContextManager:
    """bf16 autocast on the run's device, or nothing for fp32 (`precision` "auto" resolved by
    `tying.devices.resolve_precision`)."""
    return autocast_for(device, cfg.precision)()


#: TrainConfig keys that fix the model: a resumed run must keep them, and its interface's
#: `fixed_settings` (the interface's keywords and the optimizers whose state a checkpoint
#: holds; learning-rate scales may change).
MODEL_KEYS = ("preset", "model", "tie", "norm", "tokenizer")


def _fixed_settings(cfg: TrainConfig) -> dict[str, Any]:
    """{key: value} a resumed run must keep: MODEL_KEYS and the interface's fixed settings
    (resolved by mode: PIT's trainable Z and initial T), as `section.key`."""
    out = {key: getattr(cfg, key) for key in MODEL_KEYS}
    options = cfg.interface_options
    if options is not None:
        teacher = cfg.model is not None
        out |= {f"{cfg.tie}.{k}": v for k, v in options.fixed_settings(teacher=teacher).items()}
    return out


def check_resume_compatible(saved: TrainConfig, cfg: TrainConfig, where: Path) -> None:
    """Raise ConfigError naming the first model, interface or optimizer setting `cfg` changes
    from `saved` (`_fixed_settings`)."""
    old, new = _fixed_settings(saved), _fixed_settings(cfg)
    for key in dict.fromkeys([*old, *new]):
        if old.get(key) != new.get(key):
            raise ConfigError(
                f"cannot resume {where}: it was trained with {key}={old.get(key)!r}, this run "
                f"asks for {key}={new.get(key)!r}; resume with the same setting, or choose "
                "another out"
            )


def run_folder(cfg: TrainConfig) -> RunFolder:
    """The run folder of `cfg` for the session: `out`, resume, the settings a resume keeps."""
    run_dir = Path(cfg.out)

    def check(state: dict[str, Any], found: Path) -> None:
        saved = saved_train_config(state["config"], source=str(found / "trainer.json"))
        check_resume_compatible(saved, cfg, run_dir)

    return RunFolder(
        path=run_dir,
        resume=cfg.resume,
        resume_option="resume=true",
        check_saved=check,
    )


def _distilling(model: nn.Module) -> bool:
    return isinstance(model, DistillationObjective)


class TrainWeights(ModelWeights):
    """The whole model in a checkpoint, through torch.distributed.checkpoint (full, unsharded,
    on the CPU; collectives under FSDP). Under distillation the student's state alone, under
    its own parameter names.

    Args:
        model: the unwrapped objective (the model, or the distillation objective holding it).
        optimizer: the run's optimizers.
    """

    def model_state(self) -> dict[str, torch.Tensor]:
        state = super().model_state()
        return strip_student_prefix(state) if _distilling(self.model) else state

    def optimizer_state(self) -> dict[str, Any]:
        state = super().optimizer_state()
        if _distilling(self.model):
            state = rename_optimizer_state(state, lambda n: n.removeprefix("student."))
        return state

    def load(self, model_state: dict[str, torch.Tensor], optimizer_state: dict[str, Any]) -> None:
        if _distilling(self.model):
            optimizer_state = rename_optimizer_state(optimizer_state, lambda n: "student." + n)
        super().load(model_state, optimizer_state)

    def load_model(self, model_state: dict[str, torch.Tensor]) -> None:
        if _distilling(self.model):
            model_state = add_student_prefix(model_state)
        super().load_model(model_state)


def _record_conversion(model: nn.Module, run_dir: Path, logger: MetricsLogger) -> None:
    """Teacher mode: conversion.json (the ConversionReport) and a step-0 row with its KL."""
    from tying.hf import conversion_report

    report = conversion_report(model)  # a transformers model, or a converted decoder run
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

    The run folder `cfg.out` belongs to a run session (`tying.train.session`) for the whole
    run: locked (rank 0 holds the lock for a torchrun process group), refused when used and not
    resumed, resumed from its newest intact checkpoint, checkpointed at SIGINT/SIGTERM.

    Raises:
        DivergenceError: the loss became non-finite (the last good checkpoint is kept).
        CheckpointWriteError: a checkpoint could not be written (full disk; the previous one
            is kept).
        RunInterrupted: SIGINT or SIGTERM (a checkpoint of the last step was written).
        ConfigError: inconsistent settings (batch sizes, existing run folder, ...).
        RunFolderInUseError: another live process is running in `cfg.out`.
    """
    # ------------------------------------------------------------------ folder
    info = init_distributed()
    deterministic_before = torch.are_deterministic_algorithms_enabled()
    try:
        cfg.grad_accum_steps(info.world_size)  # bad batch sizes: refused before the folder
        with RunSession(run_folder(cfg), info) as session:
            result = session.run(lambda resume_from: _prepare(cfg, info, setup, resume_from))
        return TrainResult(
            run_dir=Path(cfg.out),
            steps=result.steps,
            tokens=result.tokens,
            final_loss=result.final_loss,
            val_loss=result.val_loss,
            elapsed_s=result.elapsed_s,
        )
    finally:
        torch.use_deterministic_algorithms(deterministic_before)
        cleanup(info)


#: This module's log (the CLI formats it as "tying train: ..."); progress lines at INFO.
logger = logging.getLogger(__name__)


def _seed_and_kernels(cfg: TrainConfig, info: DistInfo) -> None:
    torch.manual_seed(cfg.seed)
    if cfg.deterministic:
        if info.device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)


def _objective(cfg: TrainConfig, model: nn.Module, info: DistInfo) -> nn.Module:
    """The model, or the distillation objective around it (with its frozen teacher)."""
    if not cfg.distill.enabled:
        return model
    teacher = load_teacher(cfg.distill, cfg.model).to(info.device)
    return DistillationObjective(
        model,
        teacher,
        cfg.distill.alpha,
        cfg.distill.temperature,
        teacher_autocast=resolve_precision(cfg.precision, info.device) == "bf16",
    )


def _validation(cfg: TrainConfig, setup: TrainingSetup, wrapped: nn.Module, info: DistInfo) -> Any:
    """The held-out loss of the run's validation store, or None without one."""
    if setup.val_store is None:
        return None

    def validate() -> dict[str, float]:
        result = evaluate(
            wrapped,  # eager: a compiled model would compile its eval-mode graph once more
            setup.val_store,
            seq_len=cfg.seq_len,
            batch_size=cfg.micro_batch_size,
            max_tokens=cfg.eval_tokens,
            autocast=autocast_for(info.device, cfg.precision),
            device=info.device,
        )
        return {"val_loss": result["loss"], "val_ppl": result["ppl"]}

    return validate


def _build_run(cfg: TrainConfig, info: DistInfo, setup: TrainingSetup) -> Run:
    """The run of `cfg` for the loop: the model on its device, wrapped, compiled, optimized."""
    model = setup.model.to(info.device)
    interface = unwrap(model).interface
    wrapped = wrap_model(_objective(cfg, model, info), info, cfg.distributed)
    # the student's parameters only (a distilling objective also holds the frozen teacher)
    optimizer = optimizers_for_run(model, cfg)
    compiled = resolve_compile(cfg.compile, info.device, hooks=cfg.track_gradient_paths)
    vocab_size = interface.vocab_size
    return Run(
        folder=Path(cfg.out),
        info=info,
        forward=torch.compile(wrapped) if compiled else wrapped,
        module=wrapped,
        parameters=list(unwrap(wrapped).parameters()),
        optimizer=optimizer,
        batches=setup.sampler,
        weights=TrainWeights(unwrap(wrapped), optimizer),
        vocab_size=vocab_size,
        autocast=autocast_for(info.device, cfg.precision),
        id_hint=_SHARD_MISMATCH.format(V=vocab_size),
        loss_parts=("ce", "kl") if cfg.distill.enabled else (),
        ddp_no_sync=info.enabled and cfg.distributed == "ddp",
        data_key="sampler",
        trainer_state=lambda: {"config": to_dict(cfg)},
        validate=_validation(cfg, setup, wrapped, info),
        checkpoint_files=lambda folder: save_config(cfg, folder / "config.yaml"),
    )


def loop_settings(cfg: TrainConfig, info: DistInfo) -> LoopSettings:
    """The loop's settings of a training run."""
    return LoopSettings(
        max_steps=cfg.max_steps,
        optim=OptimizerSettings.of(cfg),
        accum=cfg.grad_accum_steps(info.world_size),
        eval_every=cfg.eval_every,
        checkpoint_every=cfg.checkpoint_every,
        keep_last=cfg.keep_last,
        tensorboard=cfg.tensorboard,
        progress=f"train {cfg.tie}" if cfg.progress else None,
    )


def _prepare(
    cfg: TrainConfig, info: DistInfo, setup: TrainingSetup | None, resume_from: Path | None
) -> Prepared:
    """The training run for the session: data and model built (calibrated unless resumed),
    config.yaml written, the loop's run; the PIT retraction and the gradient-path tracker
    attached after a restore; the conversion's step-0 row of a fresh teacher run."""
    _seed_and_kernels(cfg, info)
    built = setup or build_setup(cfg, info, calibrate=resume_from is None)
    run_dir = Path(cfg.out)
    if info.is_main:  # written only now: the data, tokenizer and model were built without error
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
    run = _build_run(cfg, info, built)
    model = built.model

    def after_restore() -> None:
        attach_retraction_for_run(unwrap(model), run.optimizer, cfg)  # after loading
        interface = unwrap(model).interface
        run.tracker = built.make_tracker(interface) if cfg.track_gradient_paths else None

    return Prepared(
        run=run,
        settings=loop_settings(cfg, info),
        after_restore=after_restore,
        fresh_rows=lambda metrics: _record_conversion(model, run_dir, metrics),
    )
