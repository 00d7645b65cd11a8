"""`tying convert` and `tying export`: the folder-to-folder pipelines of teacher mode."""

from __future__ import annotations

from typing import Any

import torch

from tying.hf import export, interface_of
from tying.loader import load_for_export
from tying.options.convert import TRAINING_ONLY_KEYS as TRAINING_ONLY_KEYS
from tying.options.convert import ConvertOptions as ConvertOptions
from tying.options.convert import ExportOptions as ExportOptions
from tying.outputs import output_folder
from tying.teacher.step0 import convert_spec


def convert_to_folder(options: ConvertOptions) -> dict[str, Any]:
    """Load the teacher, convert it, save it (whole or not at all); returns {"out", "report"}.

    The conversion gets calibration windows when it asks for them (PIT's defaults do) and
    the step-0 KL is measured on `step0_tokens` held-out tokens (`tying.teacher.step0.
    convert_spec`); `report["step0"]` holds it.

    Raises:
        FileExistsError: `out` is not empty and `overwrite` is off (checked before loading).
        ValueError: an unsupported model.
    """
    with output_folder(options.out, options.overwrite) as tmp:
        model, tokenizer, report = convert_spec(
            options.spec,
            options.tie,
            dtype=getattr(torch, options.dtype),
            cache=options.cache,
            calibration_source=options.calibration,
            step0_tokens=options.step0_tokens,
            fit_options=options.pit.fit,
            source=options.source,
            **options.conversion_keywords(),
        )
        model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
    return {"out": str(options.out), "report": report.to_dict()}


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
