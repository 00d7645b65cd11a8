"""`tying eval CHECKPOINT --data PATH`: loss, perplexity and tokens of a checkpoint, as JSON."""

from __future__ import annotations

import argparse
import json

HELP = "evaluate a training checkpoint (or run folder) on a text: loss, perplexity, tokens (JSON)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a run folder or a checkpoints/step-N folder")
    parser.add_argument(
        "--data", default=None, help="text to evaluate (default: Gutenberg validation)"
    )
    parser.add_argument("--max-tokens", type=int, default=None, help="cap on evaluated tokens")
    parser.add_argument("--batch-size", type=int, default=None, help="windows per forward pass")


def run(args: argparse.Namespace) -> int:
    from tying.train.restore import evaluate_checkpoint

    result = evaluate_checkpoint(
        args.checkpoint, data=args.data, max_tokens=args.max_tokens, batch_size=args.batch_size
    )
    print(json.dumps(result, indent=2))
    return 0
