"""`tying eval SPEC [--data PATH] [--json]`: loss, perplexity and tokens of any model on a text
(no file written: `--json` prints the result as JSON)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.eval import EvalOptions

    add_config_arguments(parser, EvalOptions)


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.config_flags import config_from_args
    from tying.options.eval import EvalOptions

    options = config_from_args(EvalOptions, args)  # checked before torch loads
    from tying.evaluation.text_loss import evaluate_text

    result = evaluate_text(options)
    figures = (
        f"loss {result['loss']:.4f} nats/token, perplexity {result['ppl']:.2f}"
        if result["finite"]
        else "loss not finite"
    )
    where = result["checkpoint"] or result["spec"]
    lines = [
        f"{where}: {figures} over {result['tokens']:,} tokens of {result['data']} "
        f"({result['precision']})"
    ]
    report(args, lines, result)
    return 0
