"""`tying export RUN_OR_DIR --out DIR`: write a plain transformers checkpoint of a converted model;
DIR/export.json says what was exported (`--json` prints it)."""

from __future__ import annotations

import argparse
from pathlib import Path

#: The export result ({"out", "tie", "tie_word_embeddings", "tokenizer"}), in the folder.
RESULT_FILE = "export.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.convert import ExportOptions

    add_config_arguments(parser, ExportOptions)


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.config_flags import config_from_args
    from tying.options.convert import ExportOptions

    options = config_from_args(ExportOptions, args)  # checked before torch loads
    from tying.teacher.conversion import export_to_folder

    result = export_to_folder(options)
    shared = "one shared matrix" if result["tie_word_embeddings"] else "separate matrices"
    lines = [
        f"exported {options.path} ({result['tie']}: {shared}"
        + (", with its tokenizer" if result["tokenizer"] else ", no tokenizer")
        + f") to {result['out']}"
    ]
    report(args, lines, result, Path(result["out"]) / RESULT_FILE)
    return 0
