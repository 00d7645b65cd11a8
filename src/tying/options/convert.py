"""Options of `tying convert` and `tying export`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tying.config import positional, tie_field
from tying.options.interface import (
    PitOptions,
    TransposeOptions,
    check_interface_config,
    options_section,
)


@dataclass
class ConvertOptions:
    """Options of `tying convert`.

    The interface's conversion options live in its section, as in a run's config
    (`tying.train.TrainConfig`): `tt:` (`TransposeOptions`) and `pit:` (`PitOptions`: t_init,
    fit, centre, input_scale, trainable_z, diag_activation), of which only the chosen
    interface's may leave its defaults. The flat keys of earlier versions (t_init, centre,
    input_scale, trainable_z, fit) are read into `pit:` with a DeprecationWarning until 0.3.

    Attributes:
        spec: the teacher: smollm2, a .gguf file, a transformers folder, a hub id, or a
            training run of our decoder (a run, `checkpoints/` or checkpoint folder).
        out: output folder (save_pretrained format + tokenizer).
        tie: token interface: untied, tt or pit.
        tt: TT's options: tt.input_grad_scale.
        pit: PIT's conversion options: pit.t_init (fit, output, input or identity; null = the
            default, fit: T and the final-norm gain fitted to the teacher on calibration text,
            docs/teacher.md), pit.fit (the fit's budget pit.fit.tokens, what moves
            pit.fit.params, step sizes), pit.centre (build Z from the centred teacher, its mean
            row an input bias; --no-pit.centre for the raw teacher), pit.input_scale (auto:
            searched on calibration text, none, or a number r), pit.trainable_z (Z a parameter
            instead of a frozen buffer). Its training keys (pit.t_scale, the optimizers) do not
            apply to a conversion.
        calibration: PIT: calibration text for input_scale=auto and t_init=fit (a file,
            folder, glob or hf:NAME; null = the Gutenberg training books).
        step0_tokens: held-out tokens (Gutenberg validation) on which the step-0
            KL(teacher ‖ converted) is measured, reported and printed (0 = skip); any tie.
        source: TT/PIT of an untied teacher: build from its input embedding or its output head
            (null = the interface's default).
        dtype: weights dtype.
        cache: cache dequantized GGUF models (in $TYING_CACHE_DIR).
        overwrite: replace a non-empty `out`.
    """

    spec: str = positional()
    out: str
    tie: str = tie_field()
    tt: TransposeOptions = field(default_factory=TransposeOptions)
    pit: PitOptions = field(default_factory=PitOptions)
    calibration: str | None = None
    step0_tokens: int = 2048
    source: Literal["input", "output"] | None = None
    dtype: Literal["float32", "float64", "bfloat16", "float16"] = "float32"
    cache: bool = True
    overwrite: bool = False

    def __post_init__(self) -> None:
        check_interface_config(self)

    def conversion_keywords(self) -> dict[str, Any]:
        """The chosen interface's conversion keywords, from its section."""
        section = options_section(self, self.tie)
        return {} if section is None else section.interface_keywords(teacher=True)


#: Keys of the interface sections that only training reads: no `tying convert` flag.
TRAINING_ONLY_KEYS = (
    "pit.t_scale",
    "pit.z_optimizer",
    "pit.z_lr_scale",
    "pit.t_optimizer",
    "pit.l_lr_scale",
)


@dataclass
class ExportOptions:
    """Options of `tying export`.

    Attributes:
        path: a folder written by `tying convert` (or save_pretrained of a converted model), or a
            teacher-mode training run.
        out: output folder: a standard transformers checkpoint that loads without tying.
        overwrite: replace a non-empty `out`.
    """

    path: str = positional()
    out: str
    overwrite: bool = False
