"""`tying convert` and `tying export`: the folder-to-folder pipelines of teacher mode."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from tying.config import positional, tie_field
from tying.conversion import FitOptions
from tying.hf import export, interface_of
from tying.loader import load_for_export
from tying.outputs import output_folder
from tying.teacher.step0 import convert_spec


@dataclass
class ConvertOptions:
    """Options of `tying convert`.

    Attributes:
        spec: the teacher: smollm2, a .gguf file, a transformers folder, a hub id, or a
            training run of our decoder (a run, `checkpoints/` or checkpoint folder).
        out: output folder (save_pretrained format + tokenizer).
        tie: token interface: untied, tt or pit.
        t_init: PIT: initialisation of T: fit (T and the final-norm gain fitted to the
            teacher on calibration text), output (keep the head), input (keep the embedding)
            or identity; null = the default, fit (docs/teacher.md).
        centre: PIT: build Z from the centred teacher and carry its mean row as an input
            bias (W_out E = I is kept; --no-centre for the raw teacher).
        input_scale: PIT scale correction: auto (searched on calibration text), none, or a
            number r (E at r times the teacher's scale, the head kept by the final-norm gain).
        calibration: PIT: calibration text for input_scale=auto and t_init=fit (a file,
            folder, glob or hf:NAME; null = the Gutenberg training books).
        fit: the fit of t_init=fit: fit.tokens (budget in calibration tokens), fit.params
            (what moves: a subset of t,gain,bias,z), step sizes.
        step0_tokens: held-out tokens (Gutenberg validation) on which the step-0
            KL(teacher ‖ converted) is measured, reported and printed (0 = skip).
        source: TT/PIT of an untied teacher: build from its input embedding or its output head
            (null = the interface's default).
        trainable_z: PIT: make Z a parameter (default: a frozen buffer).
        dtype: weights dtype.
        cache: cache dequantized GGUF models (in $TYING_CACHE_DIR).
        overwrite: replace a non-empty `out`.
    """

    spec: str = positional()
    out: str
    tie: str = tie_field()
    t_init: Literal["fit", "output", "input", "identity"] | None = None
    centre: bool = True
    input_scale: str = "auto"
    calibration: str | None = None
    fit: FitOptions = field(default_factory=FitOptions)
    step0_tokens: int = 2048
    source: Literal["input", "output"] | None = None
    trainable_z: bool = False
    dtype: Literal["float32", "float64", "bfloat16", "float16"] = "float32"
    cache: bool = True
    overwrite: bool = False


def convert_to_folder(options: ConvertOptions) -> dict[str, Any]:
    """Load the teacher, convert it, save it (whole or not at all); returns {"out", "report"}.

    The conversion gets calibration windows when it asks for them (PIT's defaults do) and
    the step-0 KL is measured on `step0_tokens` held-out tokens (`tying.teacher.step0.
    convert_spec`); `report["step0"]` holds it.

    Raises:
        FileExistsError: `out` is not empty and `overwrite` is off (checked before loading).
        ValueError: an option that does not apply to the chosen interface, an unsupported model.
    """
    defaults = ConvertOptions.__dataclass_fields__
    conversion: dict[str, Any] = {"source": options.source}
    # The interface's own options, passed only when set (an option of another interface raises;
    # the defaults here are PIT's own).
    for key in ("t_init", "centre", "input_scale", "trainable_z"):
        value = getattr(options, key)
        if value != defaults[key].default:
            conversion[key] = value
    with output_folder(options.out, options.overwrite) as tmp:
        model, tokenizer, report = convert_spec(
            options.spec,
            options.tie,
            dtype=getattr(torch, options.dtype),
            cache=options.cache,
            calibration_source=options.calibration,
            step0_tokens=options.step0_tokens,
            fit_options=options.fit,
            **conversion,
        )
        model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
    return {"out": str(options.out), "report": report.to_dict()}


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


def export_to_folder(options: ExportOptions) -> dict[str, Any]:
    """Export a converted model as a plain transformers checkpoint (whole or not at all).

    Returns:
        {"out", "tie", "tie_word_embeddings", "tokenizer"}.
    """
    with output_folder(options.out, options.overwrite) as tmp:
        model, tokenizer = load_for_export(options.path)
        export(model, tmp, tokenizer=tokenizer)
        interface = interface_of(model)
    return {
        "out": str(options.out),
        "tie": interface.tie,
        "tie_word_embeddings": interface.shares_matrix,
        "tokenizer": tokenizer is not None,
    }
