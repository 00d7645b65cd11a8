"""`tying convert SPEC --tie pit|tt|untied --out DIR`: convert a Hugging Face causal LM and save it."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "convert a Hugging Face causal LM's embedding and head to an untied/TT/PIT token interface"

_DTYPES = ("float32", "float64", "bfloat16", "float16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.hf.convert import DEFAULT_T_INIT, SOURCES
    from tying.interface.factory import TIES
    from tying.interface.pit import T_INITS

    parser.add_argument(
        "spec", help="'smollm2', a .gguf file, a model folder or a Hugging Face Hub id"
    )
    parser.add_argument("--tie", choices=TIES, default="pit", help="token interface (default: pit)")
    parser.add_argument(
        "--t-init",
        choices=T_INITS,
        default=None,
        help=f"PIT: which side of the teacher to keep exactly (default: {DEFAULT_T_INIT})",
    )
    parser.add_argument(
        "--source",
        choices=SOURCES,
        default=None,
        help="TT/PIT of an untied teacher: build from its input embedding or its output head",
    )
    parser.add_argument(
        "--trainable-z",
        action="store_true",
        help="PIT: make Z a parameter (default: frozen buffer)",
    )
    parser.add_argument(
        "--dtype", choices=_DTYPES, default="float32", help="weights dtype (default: float32)"
    )
    parser.add_argument(
        "--no-cache", action="store_true", help="do not cache dequantized GGUF models"
    )
    parser.add_argument(
        "--out", required=True, help="output folder (save_pretrained format + tokenizer)"
    )


def run(args: argparse.Namespace) -> int:
    import torch

    from tying.hf.convert import convert
    from tying.hf.loading import load

    options = {"trainable_z": True} if args.trainable_z else {}
    if args.trainable_z and args.tie != "pit":
        print("tying convert: error: --trainable-z applies to --tie pit only", file=sys.stderr)
        return 2
    try:
        model, tokenizer = load(
            args.spec, dtype=getattr(torch, args.dtype), cache=not args.no_cache
        )
        report = convert(
            model, args.tie, t_init=args.t_init, source=args.source, tokenizer=tokenizer, **options
        )
    except (ValueError, FileNotFoundError, OSError, NotImplementedError) as e:
        print(f"tying convert: error: {e}", file=sys.stderr)
        return 1
    model.save_pretrained(args.out)
    if tokenizer is not None:
        tokenizer.save_pretrained(args.out)
    print(json.dumps({"out": str(args.out), "report": report.to_dict()}, indent=2))
    return 0
