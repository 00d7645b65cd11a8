"""`tying tokenize [SOURCE ...] [--out DIR]`: tokenize a corpus into token shards."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.tokenize import TokenizeOptions

    add_config_arguments(parser, TokenizeOptions)


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.config_flags import config_from_args
    from tying.options.tokenize import TokenizeOptions

    options = config_from_args(TokenizeOptions, args)  # checked before torch loads
    from tying.data.tokenize_corpus import tokenize_corpus

    summary = tokenize_corpus(options)
    s = summary
    lines = [
        f"tokenized {s['documents']:,} documents: {s['tokens']:,} tokens in {s['shards']} "
        f"shard(s) ({s['dtype']}, tokenizer {s['tokenizer']}, vocabulary {s['vocab_size']:,})",
        f"shards: {s['folder']} (manifest.json describes them)",
    ]
    report(args, lines, summary)
    return 0
