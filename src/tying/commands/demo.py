"""`tying demo`: probe a teacher, continue it as TT and PIT, lens and probe both, report.

Writes OUT/report.html (self-contained), report.md and report.json, and prints a summary
table. A second run reuses the tokenized shards (cache) and skips finished runs.
"""

from __future__ import annotations

import argparse

HELP = "the README's first command: SmolLM2 -> TT and PIT, continued pretraining, report"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.experiment.demo import DEMO_TOKENS

    parser.add_argument(
        "--model", default="smollm2", help="teacher (a tying.hf.load spec; default smollm2)"
    )
    parser.add_argument(
        "--data", default=None, help="training text (default: a few Gutenberg training books)"
    )
    parser.add_argument(
        "--val-data", default=None, help="validation/lens text (default: Gutenberg validation)"
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=DEMO_TOKENS,
        help=f"training tokens per run (default {DEMO_TOKENS})",
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="optimizer steps (overrides --budget)"
    )
    parser.add_argument("--out", default="runs/demo", help="output folder (default runs/demo)")
    parser.add_argument("--seq-len", type=int, default=256, help="tokens per window (256)")
    parser.add_argument(
        "--batch-tokens", type=int, default=2048, help="tokens per optimizer step (2048)"
    )
    parser.add_argument(
        "--lens-tokens", type=int, default=2048, help="positions of the logit lens (2048)"
    )
    parser.add_argument(
        "--precision", choices=("bf16", "fp32"), default="bf16", help="training precision"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from tying.experiment.demo import demo_config, run_demo

    cfg = demo_config(
        model=args.model,
        data=args.data,
        val_data=args.val_data,
        budget=args.budget,
        steps=args.steps,
        out=args.out,
        seq_len=args.seq_len,
        batch_tokens=args.batch_tokens,
        lens_tokens=args.lens_tokens,
        precision=args.precision,
    )
    run_demo(cfg, progress=not args.no_progress)
    return 0
