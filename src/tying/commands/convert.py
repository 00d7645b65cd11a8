"""`tying convert SPEC --tie pit|tt|untied --out DIR`: convert a Hugging Face causal LM and save it."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "convert a Hugging Face causal LM's embedding and head to an untied/TT/PIT token interface"

_DTYPES = ("float32", "float64", "bfloat16", "float16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.hf.calibrate import FitOptions
    from tying.hf.convert import DEFAULT_T_INIT, PIT_INITS, SOURCES
    from tying.interface.factory import TIES

    fit = FitOptions()
    parser.add_argument(
        "spec", help="'smollm2', a .gguf file, a model folder or a Hugging Face Hub id"
    )
    parser.add_argument("--tie", choices=TIES, default="pit", help="token interface (default: pit)")
    parser.add_argument(
        "--t-init",
        choices=PIT_INITS,
        default=None,
        help=f"PIT: initialisation (default: {DEFAULT_T_INIT}; see docs/teacher.md)",
    )
    parser.add_argument(
        "--no-centre",
        action="store_true",
        help="PIT: build Z from the raw teacher, without the mean row as input bias",
    )
    parser.add_argument(
        "--input-scale",
        default="auto",
        help="PIT scale correction: 'auto' (searched on calibration text), 'none' or a number r",
    )
    parser.add_argument(
        "--calibration",
        default=None,
        help="PIT: calibration text for --input-scale auto and --t-init fit "
        "(default: the Gutenberg training split)",
    )
    parser.add_argument(
        "--fit-tokens",
        type=int,
        default=fit.tokens,
        help=f"PIT fit: budget in calibration tokens (default: {fit.tokens})",
    )
    parser.add_argument(
        "--fit-params",
        default=fit.params,
        help=f"PIT fit: what moves, a subset of t,gain,bias,z (default: {fit.params})",
    )
    parser.add_argument(
        "--step0-tokens",
        type=int,
        default=2048,
        help="held-out tokens on which the step-0 KL(teacher ‖ converted) is measured and "
        "printed (default: 2048 of Gutenberg validation; 0: skip)",
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

    from tying.experiments.teacher_init import convert_spec
    from tying.hf.calibrate import FitOptions

    options = {"trainable_z": True} if args.trainable_z else {}
    if args.trainable_z and args.tie != "pit":
        print("tying convert: error: --trainable-z applies to --tie pit only", file=sys.stderr)
        return 2
    if args.tie == "pit":
        options.update(t_init=args.t_init, centre=not args.no_centre, input_scale=args.input_scale)
    try:
        fit = FitOptions(tokens=args.fit_tokens, params=args.fit_params)
        model, tokenizer, report = convert_spec(
            args.spec,
            args.tie,
            dtype=getattr(torch, args.dtype),
            cache=not args.no_cache,
            calibration_source=args.calibration,
            step0_tokens=args.step0_tokens,
            fit_options=fit,
            source=args.source,
            **options,
        )
    except (ValueError, FileNotFoundError, OSError, NotImplementedError) as e:
        print(f"tying convert: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, ValueError) else 1
    model.save_pretrained(args.out)
    if tokenizer is not None:
        tokenizer.save_pretrained(args.out)
    if report.step0 is not None:
        s = report.step0
        print(
            f"step 0: KL(teacher ‖ converted) = {s['kl']:.3f} nats/token, loss {s['loss']:.3f} "
            f"(teacher {s['teacher_loss']:.3f}) on {s['tokens']} held-out tokens",
            file=sys.stderr,
        )
    print(json.dumps({"out": str(args.out), "report": report.to_dict()}, indent=2))
    return 0
