"""`TrainConfig`: every knob of `tying train`, with defaults that train `tiny` on Gutenberg."""

from __future__ import annotations

from dataclasses import dataclass, field

from tying.config import ConfigError
from tying.hf.calibrate import FitOptions
from tying.interface import check_tie
from tying.train.distill import DistillConfig

PRECISIONS = ("bf16", "fp32")
DISTRIBUTED = ("ddp", "fsdp")


@dataclass
class TrainConfig:
    """Configuration of one training run (YAML file + `key=value` overrides).

    Model:
        preset: decoder preset for scratch mode (`tiny`, `mini`, `small`, ...).
        model: a `tying.hf.load` spec (hub id, folder, .gguf, `smollm2`) for
            teacher mode; None trains the preset from scratch.
        tie: token interface, "untied", "tt" or "pit".
        t_init: teacher-mode PIT initialisation ("identity", "output", "input" or "fit");
            None = the default of `tying.hf.convert` with calibration windows ("fit").
        pit_centre: teacher-mode PIT: centred memory with the mean row as input bias.
        pit_input_scale: teacher-mode PIT scale correction: a number r, "auto" (searched
            on calibration windows) or "none" (`tying.hf.convert.PitOptions`).
        fit: the `fit` section (`tying.hf.calibrate.FitOptions`) of t_init="fit":
            calibration tokens (drawn from the training data with seed + 1), what is
            fitted, step sizes. E.g. `fit.tokens=32768`.
        step0_tokens: teacher mode: validation tokens on which the step-0 KL(teacher ‖
            converted) is measured and written to conversion.json (0 = not measured).
        pit_trainable_z: train PIT's memory Z (Stiefel retraction after each step).
            None (default) = trained in scratch mode (a frozen random Z leaves no
            per-token parameter to learn), frozen in teacher mode (Z keeps the
            teacher's polar factor).
        pit_diag_activation: "exp" or "softplus" for L's diagonal.
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
    Distillation:
        distill: the `distill` section (`tying.train.distill.DistillConfig`):
            teacher (None = off, "initial" = the model before conversion, or a spec),
            alpha, temperature; loss = (1 − α)·CE + α·τ²·KL(teacher_τ ‖ student_τ),
            logged as loss, ce and kl. YAML `distill: {teacher: initial, alpha: 0.5}`
            or overrides `distill.teacher=initial distill.alpha=0.5`.
    """

    preset: str = "tiny"
    model: str | None = None
    tie: str = "tt"
    t_init: str | None = None
    pit_centre: bool = True
    pit_input_scale: float | str = "auto"
    fit: FitOptions = field(default_factory=FitOptions)
    step0_tokens: int = 2048
    pit_trainable_z: bool | None = None
    pit_diag_activation: str = "exp"
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

    distill: DistillConfig = field(default_factory=DistillConfig)

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
