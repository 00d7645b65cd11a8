"""`tying add-tokens SPEC --tokens FILE --out DIR [--init mean|subwords]`: grow the vocabulary of
a model (and its tokenizer) by one id per new string; DIR loads with `tying.load`."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.add_tokens import AddTokensOptions

    add_config_arguments(parser, AddTokensOptions)


def run(args: argparse.Namespace) -> int:
    import json
    import logging

    from tying.config_flags import config_from_args
    from tying.options.add_tokens import AddTokensOptions

    options = config_from_args(AddTokensOptions, args)  # checked before torch loads
    from tying.update import add_tokens

    log = logging.getLogger("tying.update.tokens")
    result = add_tokens(options, log=log.info)
    print(
        json.dumps(
            {"out": str(result.out), "ids": result.ids, "old_text": result.record["old_text"]},
            indent=2,
        )
    )
    return 0
