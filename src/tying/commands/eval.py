"""`tying eval SPEC [--data PATH]`: loss, perplexity and tokens of any model on a text, as JSON."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.eval import EvalOptions

    add_config_arguments(parser, EvalOptions)


def run(args: argparse.Namespace) -> int:
    from tying.config_flags import config_from_args
    from tying.options.eval import EvalOptions

    options = config_from_args(EvalOptions, args)  # checked before torch loads
    from tying.evaluation.text_loss import evaluate_text

    print(json.dumps(evaluate_text(options), indent=2))
    return 0
