"""`TrainConfig`: every knob of `tying train`, with defaults that train `tiny` on Gutenberg,
and its `distill` section (`DistillConfig`).

Torch-free (the schema layer); `tying.train.config` re-exports it."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

from tying.config import ConfigError, renamed, tie_field
from tying.options.common import Precision
from tying.options.common import contradictions as contradictions  # one check, re-exported
from tying.options.interface import (
    INTERFACE_SECTIONS,
    PitOptions,
    TransposeOptions,
    check_interface_config,
    options_section,
)

#: The `distill.teacher` value that names the run's own model before conversion.
INITIAL = "initial"


@dataclass
class DistillConfig:
    """The `distill` section of `TrainConfig` (YAML mapping or `distill.KEY=VALUE` overrides).

    Attributes:
        teacher: None (no distillation), "initial" (teacher mode: the run's `model`
            before conversion) or a model spec: anything `tying.hf.load` accepts
            (a name such as "smollm2", a .gguf file, a transformers folder, a hub id)
            or a teacher-mode training run folder. Same vocabulary as the student.
        alpha: α in [0, 1], the weight of the KL term (0: plain cross-entropy).
        temperature: τ > 0 of both softmaxes in the KL term (the τ² factor keeps
            its gradient on the scale of the cross-entropy's).
    """

    teacher: str | None = None
    alpha: float = 0.5
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError(f"distill.alpha must be in [0, 1], got {self.alpha}")
        if not self.temperature > 0:
            raise ConfigError(f"distill.temperature must be > 0, got {self.temperature}")
        if self.teacher is not None and not str(self.teacher).strip():
            raise ConfigError("distill.teacher is empty: give a model spec, 'initial' or null")

    @property
    def enabled(self) -> bool:
        """Whether the run distills (a teacher is named)."""
        return self.teacher is not None


@dataclass
class TrainConfig:
    """Configuration of one training run (YAML file, `key=value` overrides or `--key value` flags).

    Attributes:
        preset: decoder preset trained from scratch (tiny, mini, small, medium, large, xl).
        model: teacher mode: the pretrained model to convert and continue (smollm2, a .gguf, a
            transformers folder, a hub id, or a training run of our decoder, converted on its own
            interface); null trains `preset` from scratch.
        tie: token interface: untied, tt (W_out = E^T) or pit (pseudo-inverse tying).
        step0_tokens: teacher mode: validation tokens on which the step-0 KL(teacher ‖
            converted) is measured, written to conversion.json and a step-0 metrics row (0 =
            not measured).
        tt: TT's options (`tying.interface.options.TransposeOptions`): tt.input_grad_scale,
            the multiplier of the input-side gradient of E (unitless).
        pit: PIT's options (`tying.interface.options.PitOptions`): pit.t_init, pit.fit (the
            fit of t_init=fit: pit.fit.tokens, pit.fit.params, ...; the flat `fit` of earlier
            versions is read with a DeprecationWarning) and
            pit.centre, pit.input_scale (teacher-mode conversion), pit.trainable_z,
            pit.diag_activation, pit.t_scale (scratch T = c·I), pit.z_optimizer,
            pit.z_lr_scale, pit.t_optimizer, pit.l_lr_scale (how Z and T are optimised).
        norm: scratch mode: rms (RMSNorm) or layer (LayerNorm).
        data: training text (a file, folder, glob or hf:NAME); null = the Gutenberg train books.
        val_data: held-out text; null = Gutenberg validation; an empty string = no validation.
        tokenizer: scratch mode: gpt2, smollm2, a tokenizer folder, tokenizer.json or .gguf.
        max_documents: cap on the training documents tokenized (null = all).
        max_tokens: cap on the training tokens tokenized (whole documents, the last one reaching
            it): auto = what the run will read (`tying.train.build.data_token_budget`: max_steps
            × global_batch_tokens, plus the teacher-mode calibration, rounded up to a power of
            two, at least 2^20), so a short run tokenizes a few books, not the corpus; an integer;
            null = the whole source (what `tying experiment` grids use). The held-out text is
            cut likewise to what validation reads (`validation_token_budget`), unless null.
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
    step0_tokens: int = 2048
    tt: TransposeOptions = field(default_factory=TransposeOptions)
    pit: PitOptions = field(default_factory=PitOptions)
    norm: Literal["rms", "layer"] = "rms"

    data: str | None = None
    val_data: str | None = None
    tokenizer: str = "gpt2"
    max_documents: int | None = None
    max_tokens: int | Literal["auto"] | None = "auto"

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
        check_interface_config(self)
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
        options = self.interface_options
        if options is not None:
            try:
                options.check(teacher=self.model is not None, distributed=self.distributed)
            except ValueError as e:
                raise ConfigError(str(e)) from None

    @property
    def interface_options(self) -> Any | None:
        """The options section of this run's interface (`self.tt`, `self.pit`, ...; through
        `INTERFACE_SECTIONS`, the registry's names), or None for an interface without
        options."""
        return options_section(self, self.tie)

    def interface_keywords(self) -> dict[str, Any]:
        """{keyword: value} for this run's interface: the keywords of its scratch constructor
        (no `model`) or of its teacher conversion, from its options section."""
        options = self.interface_options
        if options is None:
            return {}
        return options.interface_keywords(teacher=self.model is not None)

    def __getattr__(self, name: str) -> Any:
        # Flat keys of earlier versions (pit_t_scale, input_grad_scale, ...) read from their
        # section for one release, with a DeprecationWarning.
        for tie, options_class in INTERFACE_SECTIONS.items():
            moved = getattr(options_class, "MOVED_KEYS", {})
            if name in moved and tie in self.__dict__:
                warnings.warn(
                    f"TrainConfig.{name} is now TrainConfig.{tie}.{moved[name]}; the old "
                    "name will be removed in tying 0.3",
                    DeprecationWarning,
                    stacklevel=2,
                )
                return getattr(self.__dict__[tie], moved[name])
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

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
