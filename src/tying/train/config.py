"""`TrainConfig`: every knob of `tying train`, with defaults that train `tiny` on Gutenberg."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tying.config import ConfigError
from tying.interface import check_tie

PRECISIONS = ("bf16", "fp32")
#: How a trained PIT memory Z is optimised (tying.train.optim).
Z_OPTIMIZERS = ("adamw", "riemannian_adam")
#: How PIT's T = L Lᵀ is optimised (tying.train.optim).
T_OPTIMIZERS = ("adamw", "riemannian_adam")
#: Rule value of pit_z_lr_scale (tying.train.optim.z_lr_scale).
ENTRY_SIZE = "entry_size"
#: Rule value of pit_t_scale: E's initial rows as long as a standard N(0, init_std²) row.
T_SCALE_MATCH_TT = "match_tt"
DISTRIBUTED = ("ddp", "fsdp")


@dataclass
class TrainConfig:
    """Configuration of one training run (YAML file + `key=value` overrides).

    Model:
        preset: decoder preset for scratch mode (`tiny`, `mini`, `small`, ...).
        model: a `tying.hf.load` spec (hub id, folder, .gguf, `smollm2`) for
            teacher mode; None trains the preset from scratch.
        tie: token interface, "untied", "tt" or "pit".
        t_init: teacher-mode PIT initialisation of T ("identity", "output", "input").
        pit_trainable_z: train PIT's memory Z (Stiefel retraction after each step).
            None (default) = trained in scratch mode (a frozen random Z leaves no
            per-token parameter to learn), frozen in teacher mode (Z keeps the
            teacher's polar factor).
        pit_diag_activation: "exp" or "softplus" for L's diagonal.
        pit_t_scale: scratch-mode PIT: the initial T = c·I (E = Z/c, W_out = c·Zᵀ), a
            positive number or "match_tt": c = 1/(init_std·√V), so that E's rows have
            the mean norm init_std·√d of an N(0, init_std²) (untied/TT) row (0.223 for
            V = 50,257). 1 (default) is the PIT paper's T = I. Teacher mode takes T from t_init.
        pit_z_optimizer: how a trained Z is optimised: "adamw" (an AdamW group, then the
            polar retraction after each step) or "riemannian_adam" (geoopt's RiemannianAdam
            on the Stiefel manifold; see tying.train.optim). A frozen Z: pit_trainable_z=false.
        pit_z_lr_scale: Z's learning rate = lr(step) × this: a positive number, or
            "entry_size": the relative step of a standard N(0, init_std²) matrix under
            AdamW, (1/√V)/init_std for "adamw" (0.223 at V = 50,257) and √d/init_std for
            "riemannian_adam" (800 at d = 256); see tying.train.optim.z_lr_scale.
        pit_t_optimizer: how T = L Lᵀ is optimised: "adamw" (AdamW on the stored Cholesky
            parameter, the PIT paper's) or "riemannian_adam" (Riemannian Adam on the SPD
            manifold, affine-invariant metric: tying.train.optim.CholeskySPDAdam; its
            learning rate is the size of the step of log T per step).
        pit_l_lr_scale: T's learning rate = lr(step) × this (> 0).
        input_grad_scale: TT only: multiplies the input-side gradient of E.
        norm: "rms" or "layer" (scratch mode).
    Data:
        data: training text (file, folder, glob or `hf:NAME`); None = Gutenberg train shards.
        val_data: held-out text; None = Gutenberg validation.jsonl.xz; "" disables validation.
        tokenizer: tokenizer spec for scratch mode ("gpt2", a folder, a .gguf, "smollm2").
        max_documents: cap on training documents tokenized (None = all).
    Optimisation:
        max_steps: optimizer steps.
        seq_len: tokens per window.
        global_batch_tokens: tokens per optimizer step over all processes and
            micro-batches; must be a multiple of seq_len × micro_batch_size × world size.
        micro_batch_size: windows per forward pass per process.
        lr, min_lr_ratio, warmup_steps: linear warm-up to lr, cosine decay to lr × min_lr_ratio.
        weight_decay, beta1, beta2, grad_clip: AdamW and gradient-norm clipping (0 = off).
        precision: "bf16" (autocast) or "fp32".
        compile: wrap the model in torch.compile.
        seed: initialisation and data order.
        deterministic: use PyTorch's deterministic kernels (CPU scatter/index-add are
            otherwise order-nondeterministic), so a resumed run repeats the losses exactly.
    Evaluation, checkpoints, logging:
        eval_every: steps between validation passes (0 = only at the end).
        eval_tokens: tokens evaluated per validation pass.
        out_dir: run folder (metrics.jsonl, config.yaml, checkpoints/, tensorboard/).
        checkpoint_every: steps between checkpoints (0 = only at the end).
        keep_last: checkpoints kept.
        resume: continue from the newest checkpoint in out_dir.
        distributed: "ddp" or "fsdp" when launched by torchrun.
        track_gradient_paths: log the input/output split of the interface gradient.
        tensorboard: also write TensorBoard event files.
        progress: show a progress bar.
    """

    preset: str = "tiny"
    model: str | None = None
    tie: str = "tt"
    t_init: str = "output"
    pit_trainable_z: bool | None = None
    pit_diag_activation: str = "exp"
    pit_t_scale: float | str = 1.0
    pit_z_optimizer: str = "adamw"
    pit_z_lr_scale: float | str = 1.0
    pit_t_optimizer: str = "adamw"
    pit_l_lr_scale: float = 1.0
    input_grad_scale: float = 1.0
    norm: str = "rms"

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
    precision: str = "bf16"
    compile: bool = False
    seed: int = 0
    deterministic: bool = True

    eval_every: int = 100
    eval_tokens: int = 65536
    out_dir: str = "runs/train"
    checkpoint_every: int = 100
    keep_last: int = 2
    resume: bool = False
    distributed: str = "ddp"
    track_gradient_paths: bool = False
    tensorboard: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        try:
            check_tie(self.tie)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.distributed not in DISTRIBUTED:
            raise ConfigError(f"distributed must be one of {DISTRIBUTED}, got {self.distributed!r}")
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
        """Validate the pit_t_scale / pit_z_* / pit_l_* keys (PIT only; ignored for other ties)."""
        if self.pit_z_optimizer not in Z_OPTIMIZERS:
            raise ConfigError(
                f"pit_z_optimizer must be one of {Z_OPTIMIZERS}, got {self.pit_z_optimizer!r}"
            )
        if self.pit_t_optimizer not in T_OPTIMIZERS:
            raise ConfigError(
                f"pit_t_optimizer must be one of {T_OPTIMIZERS}, got {self.pit_t_optimizer!r}"
            )
        for name, rule in (("pit_t_scale", T_SCALE_MATCH_TT), ("pit_z_lr_scale", ENTRY_SIZE)):
            value = getattr(self, name)
            if isinstance(value, str):
                if value != rule:
                    raise ConfigError(
                        f"{name} must be a positive number or {rule!r}, got {value!r}"
                    )
            elif not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number or {rule!r}, got {value!r}")
        if not (math.isfinite(self.pit_l_lr_scale) and self.pit_l_lr_scale > 0):
            raise ConfigError(
                f"pit_l_lr_scale must be a positive number, got {self.pit_l_lr_scale!r}"
            )
        if self.tie == "pit" and self.model is not None and self.pit_t_scale != 1.0:
            raise ConfigError(
                "pit_t_scale applies to scratch mode only (teacher mode takes T from t_init); "
                "leave it at 1"
            )
        for key in ("pit_z_optimizer", "pit_t_optimizer"):
            if self.tie == "pit" and getattr(self, key) != "adamw" and self.distributed == "fsdp":
                raise ConfigError(
                    f"{key}='riemannian_adam' is not supported with distributed=fsdp "
                    f"(the interface is sharded as DTensors); use distributed=ddp or {key}=adamw"
                )

    @property
    def trainable_z(self) -> bool:
        """Whether PIT's Z is trained: `pit_trainable_z`, or by mode when it is None."""
        return self.pit_trainable_z if self.pit_trainable_z is not None else self.model is None

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
