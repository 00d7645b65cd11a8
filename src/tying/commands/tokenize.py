"""`tying tokenize [SOURCE ...] [--out DIR]`: tokenize a corpus into token shards."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.tokenize import TokenizeOptions

    add_config_arguments(parser, TokenizeOptions)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    from tying.config_flags import config_from_args
    from tying.options.tokenize import TokenizeOptions

    options = config_from_args(TokenizeOptions, args)  # checked before torch loads
    from tying.data.tokenize_corpus import tokenize_corpus

    summary = tokenize_corpus(options)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for key, value in summary.items():
            print(f"{key:>11}: {value}")
    return 0
