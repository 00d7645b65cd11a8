"""`tying export RUN_OR_DIR --out DIR`: write a plain transformers checkpoint of a converted model."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "export a converted model as a standard transformers checkpoint (loads without tying)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        metavar="RUN_OR_DIR",
        help="a folder written by `tying convert --out` or save_pretrained, or a teacher-mode run",
    )
    parser.add_argument("--out", required=True, help="output folder")


def run(args: argparse.Namespace) -> int:
    from tying.hf.convert import interface_of
    from tying.hf.export import export, load_for_export
    from tying.hf.state import tie_of

    try:
        model, tokenizer = load_for_export(args.path)
    except (ValueError, FileNotFoundError, OSError) as e:
        print(f"tying export: error: {e}", file=sys.stderr)
        return 1
    out = export(model, args.out, tokenizer=tokenizer)
    tie = tie_of(interface_of(model))
    print(
        json.dumps(
            {
                "out": str(out),
                "tie": tie,
                "tie_word_embeddings": tie == "tt",
                "tokenizer": tokenizer is not None,
            },
            indent=2,
        )
    )
    return 0
