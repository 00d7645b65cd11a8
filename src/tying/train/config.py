"""`TrainConfig`: every knob of `tying train`, with defaults that train `tiny` on Gutenberg."""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from tying.config import ConfigError, from_dict, renamed, tie_field
from tying.conversion import FitOptions
from tying.devices import Precision
from tying.interface import check_tie, interface_class, ties
from tying.interface.registry import check_interface_options
from tying.train.distill import DistillConfig

#: How a trained PIT memory Z is optimised (tying.train.optim).
ZOptimizer = Literal["adamw", "riemannian_adam"]
#: How PIT's T = L Lᵀ is optimised (tying.train.optim).
TOptimizer = Literal["adamw", "riemannian_adam"]
Z_OPTIMIZERS: tuple[str, ...] = typing.get_args(ZOptimizer)
T_OPTIMIZERS: tuple[str, ...] = typing.get_args(TOptimizer)
#: Rule value of pit_z_lr_scale (tying.train.optim.z_lr_scale).
ENTRY_SIZE = "entry_size"
#: Rule value of pit_t_scale (tying.interface.pit.scratch_t_scale): c = init_std·√V.
T_SCALE_AUTO = "auto"


@dataclass
class TrainConfig:
    """Configuration of one training run (YAML file, `key=value` overrides or `--key value` flags).

    Attributes:
        preset: decoder preset trained from scratch (tiny, mini, small, medium, large, xl).
        model: teacher mode: the pretrained model to convert and continue (smollm2, a .gguf, a
            transformers folder, a hub id, or a training run of our decoder, converted on its own
            interface); null trains `preset` from scratch.
        tie: token interface: untied, tt (W_out = E^T) or pit (pseudo-inverse tying).
        t_init: teacher-mode PIT: how T is initialised (fit, output, input, identity; null =
            the conversion default, fit: T and the final-norm gain fitted to the teacher on
            calibration windows drawn from the training data with seed + 1).
        pit_centre: teacher-mode PIT: build Z from the centred teacher, its mean row an input
            bias.
        pit_input_scale: teacher-mode PIT scale correction: auto (searched on calibration
            windows), none, or a number r (E at r times the teacher's scale).
        fit: teacher-mode PIT, t_init=fit: fit.tokens (calibration tokens), fit.params (what
            moves: a subset of t,gain,bias,z), step sizes.
        step0_tokens: teacher mode: validation tokens on which the step-0 KL(teacher ‖
            converted) is measured, written to conversion.json and a step-0 metrics row (0 =
            not measured).
        pit_trainable_z: PIT: train the memory Z (with a Stiefel retraction after each step);
            null = trained from scratch, frozen in teacher mode.
        pit_diag_activation: PIT: exp or softplus, the map from parameters to L's diagonal.
        pit_t_scale: scratch-mode PIT: the initial T = c·I, so E = Z/c and W_out = c·Zᵀ
            (unitless c > 0), or auto: c = init_std·√V (4.48 at V = 50,257), which starts
            W_out's rows and the logits at an N(0, init_std²) head's scale; 1 = the paper's
            T = I; null (the default) = auto for scratch-mode PIT (the study in
            docs/training.md), 1 otherwise (see `t_scale`).
        pit_z_optimizer: PIT with a trained Z: adamw (Z is an AdamW group, then the polar
            retraction) or riemannian_adam (geoopt's RiemannianAdam on the Stiefel manifold).
        pit_z_lr_scale: PIT: Z's learning rate as a multiple of lr (unitless), or entry_size:
            Z's relative step made a standard matrix's ((1/√V)/init_std for adamw, √d/init_std
            for riemannian_adam; see tying.train.optim.z_lr_scale).
        pit_t_optimizer: PIT: adamw (AdamW on L's stored parameter, the paper's) or
            riemannian_adam (Riemannian Adam on T over the SPD manifold, affine-invariant:
            the learning rate is then the step of log T per step).
        pit_l_lr_scale: PIT: T's learning rate as a multiple of lr (unitless, > 0).
        input_grad_scale: TT: multiplier of the input-side gradient of E (unitless).
        norm: scratch mode: rms (RMSNorm) or layer (LayerNorm).
        data: training text (a file, folder, glob or hf:NAME); null = the Gutenberg train books.
        val_data: held-out text; null = Gutenberg validation; an empty string = no validation.
        tokenizer: scratch mode: gpt2, smollm2, a tokenizer folder, tokenizer.json or .gguf.
        max_documents: cap on the training documents tokenized (null = all).
        max_steps: optimizer steps.
        seq_len: tokens per window.
        global_batch_tokens: tokens per optimizer step over all processes and micro-batches
            (a multiple of seq_len × micro_batch_size × processes).
        micro_batch_size: windows per forward pass per process.
        lr: peak learning rate (after a linear warm-up).
        min_lr_ratio: final learning rate of the cosine decay, as a fraction of lr.
        warmup_steps: steps of linear warm-up.
        weight_decay: AdamW weight decay of matrices (not of norms, PIT's Z or L).
        beta1: AdamW first-moment decay.
        beta2: AdamW second-moment decay.
        grad_clip: maximum global gradient norm (0 = no clipping).
        precision: auto, bf16 (autocast) or fp32; auto = bf16 where the hardware has it.
        compile: wrap the model in torch.compile: true, false, or auto (on CUDA with Triton,
            unless track_gradient_paths; off on the CPU).
        seed: initialisation and data order.
        deterministic: use deterministic kernels, so a resumed run repeats the losses exactly.
        eval_every: steps between validation passes (0 = only at the end).
        eval_tokens: tokens per validation pass.
        out: run folder (metrics.jsonl, config.yaml, checkpoints/, tensorboard/).
        checkpoint_every: steps between checkpoints (0 = only at the end).
        keep_last: checkpoints kept (older ones are deleted).
        resume: continue from the newest intact checkpoint in `out`.
        distributed: ddp or fsdp, when launched by torchrun.
        track_gradient_paths: log the input/output split of the interface gradient.
        tensorboard: also write TensorBoard event files.
        progress: show a progress bar.
        distill: distillation from a frozen teacher: distill.teacher (null = off, initial =
            the model before conversion, or a model spec), distill.alpha, distill.temperature;
            loss = (1 − α)·CE + α·τ²·KL(teacher_τ ‖ student_τ), logged as loss, ce and kl.
    """

    preset: str = "tiny"
    model: str | None = None
    tie: str = tie_field()
    t_init: Literal["fit", "output", "input", "identity"] | None = None
    pit_centre: bool = True
    pit_input_scale: str = "auto"
    fit: FitOptions = field(default_factory=FitOptions)
    step0_tokens: int = 2048
    pit_trainable_z: bool | None = None
    pit_diag_activation: Literal["exp", "softplus"] = "exp"
    pit_t_scale: float | Literal["auto"] | None = None
    pit_z_optimizer: ZOptimizer = "adamw"
    pit_z_lr_scale: float | Literal["entry_size"] = 1.0
    pit_t_optimizer: TOptimizer = "adamw"
    pit_l_lr_scale: float = 1.0
    input_grad_scale: float = 1.0
    norm: Literal["rms", "layer"] = "rms"

    data: str | None = None
    val_data: str | None = None
    tokenizer: str = "gpt2"
    max_documents: int | None = None

    max_steps: int = 200
    seq_len: int = 256
    global_batch_tokens: int = 16384
    micro_batch_size: int = 16
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    precision: Precision = "auto"
    compile: bool | Literal["auto"] = "auto"
    seed: int = 0
    deterministic: bool = True

    eval_every: int = 100
    eval_tokens: int = 65536
    out: str = renamed("runs/train", "out_dir")
    checkpoint_every: int = 100
    keep_last: int = 2
    resume: bool = False
    distributed: Literal["ddp", "fsdp"] = "ddp"
    track_gradient_paths: bool = False
    tensorboard: bool = True
    progress: bool = True

    distill: DistillConfig = field(default_factory=DistillConfig)

    def __post_init__(self) -> None:
        try:
            check_tie(self.tie)
            check_interface_options(self, self.tie)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        for name in (
            "max_steps",
            "seq_len",
            "global_batch_tokens",
            "micro_batch_size",
            "keep_last",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        self._check_pit_optimisation()

    def _check_pit_optimisation(self) -> None:
        """Validate the pit_t_scale / pit_z_* / pit_l_* keys (choices are checked on parsing)."""
        for name, rule in (("pit_t_scale", T_SCALE_AUTO), ("pit_z_lr_scale", ENTRY_SIZE)):
            value = getattr(self, name)
            if (
                value is not None
                and value != rule
                and not (isinstance(value, int | float) and math.isfinite(value) and value > 0)
            ):
                raise ConfigError(f"{name} must be a positive number or {rule!r}, got {value!r}")
        if not (math.isfinite(self.pit_l_lr_scale) and self.pit_l_lr_scale > 0):
            raise ConfigError(
                f"pit_l_lr_scale must be a positive number, got {self.pit_l_lr_scale!r}"
            )
        if self.pit_t_scale not in (None, 1.0) and not self._scratch_pit:
            raise ConfigError(
                f"pit_t_scale applies to scratch-mode PIT only (tie=pit, no model), got "
                f"tie={self.tie!r}, model={self.model!r}: leave it unset (or 1)"
            )
        for key in ("pit_z_optimizer", "pit_t_optimizer"):
            if self.tie == "pit" and getattr(self, key) != "adamw" and self.distributed == "fsdp":
                raise ConfigError(
                    f"{key}='riemannian_adam' is not supported with distributed=fsdp "
                    f"(the interface is sharded as DTensors); use distributed=ddp or {key}=adamw"
                )

    @property
    def _scratch_pit(self) -> bool:
        return self.tie == "pit" and self.model is None

    @property
    def t_scale(self) -> float | Literal["auto"]:
        """The initial T = c·I of this run: `pit_t_scale`, or when it is None "auto" for
        scratch-mode PIT and 1 otherwise."""
        if self.pit_t_scale is not None:
            return self.pit_t_scale
        return T_SCALE_AUTO if self._scratch_pit else 1.0

    @property
    def trainable_z(self) -> bool:
        """Whether PIT's Z is trained: `pit_trainable_z`, or by mode when it is None."""
        return self.pit_trainable_z if self.pit_trainable_z is not None else self.model is None

    def interface_fields(self) -> dict[str, Any]:
        """{config key: value} of this config's keys that carry the chosen interface's options.

        The keys are the interface class's `config_options` that this config has; `None`
        values are left out (the interface's own default applies), and `pit_trainable_z`
        is resolved by mode (`trainable_z`).
        """
        mapping = interface_class(self.tie).config_options
        values = {key: getattr(self, key) for key in mapping if hasattr(self, key)}
        if "pit_trainable_z" in values:
            values["pit_trainable_z"] = self.trainable_z
        return {k: v for k, v in values.items() if v is not None}

    def grad_accum_steps(self, world_size: int) -> int:
        """Micro-batches per optimizer step per process; raises if the batch does not divide."""
        per_pass = self.seq_len * self.micro_batch_size * world_size
        if self.global_batch_tokens % per_pass:
            raise ConfigError(
                f"global_batch_tokens={self.global_batch_tokens} is not a multiple of "
                f"seq_len × micro_batch_size × world_size = {self.seq_len}×{self.micro_batch_size}×"
                f"{world_size} = {per_pass}; change one of them"
            )
        return self.global_batch_tokens // per_pass


def saved_train_config(data: dict[str, Any], source: str) -> TrainConfig:
    """The `TrainConfig` of a saved run (config.yaml, trainer.json).

    Options of other interfaces than the run's own are dropped first: earlier versions kept
    them (e.g. `t_init: output` in a TT run, where it had no effect), and the run must still
    load. Everything else is validated as in `from_dict`.
    """
    data = dict(data)
    tie = str(data.get("tie", TrainConfig.tie))
    if tie in ties():
        own = set(interface_class(tie).config_options)
        for other in ties():
            for key in interface_class(other).config_options:
                if key not in own:
                    data.pop(key, None)
    return from_dict(TrainConfig, data, source=source)
