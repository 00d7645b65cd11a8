"""`tying convert` and `tying export`: the folder-to-folder pipelines of teacher mode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from tying.config import positional, tie_field
from tying.hf import convert, export, interface_of, load
from tying.loader import load_for_export
from tying.outputs import output_folder


@dataclass
class ConvertOptions:
    """Options of `tying convert`.

    Attributes:
        spec: the teacher: smollm2, a .gguf file, a transformers folder or a hub id.
        out: output folder (save_pretrained format + tokenizer).
        tie: token interface: untied, tt or pit.
        t_init: PIT: which side of the teacher to keep (output, input, identity; null = the
            conversion default).
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
    t_init: str | None = None
    source: Literal["input", "output"] | None = None
    trainable_z: bool = False
    dtype: Literal["float32", "float64", "bfloat16", "float16"] = "float32"
    cache: bool = True
    overwrite: bool = False


def convert_to_folder(options: ConvertOptions) -> dict[str, Any]:
    """Load the teacher, convert it, save it (whole or not at all); returns {"out", "report"}.

    Raises:
        FileExistsError: `out` is not empty and `overwrite` is off (checked before loading).
        ValueError: an option that does not apply to the chosen interface, an unsupported model.
    """
    conversion: dict[str, Any] = {"source": options.source}
    if options.t_init is not None:
        conversion["t_init"] = options.t_init
    if options.trainable_z:
        conversion["trainable_z"] = True
    with output_folder(options.out, options.overwrite) as tmp:
        model, tokenizer = load(
            options.spec, dtype=getattr(torch, options.dtype), cache=options.cache
        )
        report = convert(model, options.tie, tokenizer=tokenizer, **conversion)
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
