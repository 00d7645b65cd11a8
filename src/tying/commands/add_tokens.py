"""`tying add-tokens SPEC --tokens FILE --out DIR [--init mean|subwords]`: grow the vocabulary of
a model (and its tokenizer) by one id per new string; DIR loads with `tying.load`.
DIR/add_tokens.json is the record (`--json` prints it: "out", "ids", "old_text", ...)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.add_tokens import AddTokensOptions

    add_config_arguments(parser, AddTokensOptions)


def run(args: argparse.Namespace) -> int:
    import logging

    from tying.commands import report
    from tying.config_flags import config_from_args
    from tying.options.add_tokens import AddTokensOptions

    options = config_from_args(AddTokensOptions, args)  # checked before torch loads
    from tying.update import add_tokens

    log = logging.getLogger("tying.update.tokens")
    result = add_tokens(options, log=log.info)
    from tying.update.tokens import RECORD_FILE

    record = result.record
    ids = sorted(result.ids.values())
    span = f"{ids[0]}..{ids[-1]}" if len(ids) > 1 else str(ids[0]) if ids else "none"
    lines = [
        f"added {len(ids)} token(s) (ids {span}; vocabulary {record['vocab_size']['before']:,} "
        f"-> {record['vocab_size']['after']:,}, init {options.init}) in {result.out}"
    ]
    old = record.get("old_text")
    if old:
        lines.append(
            f"old text: KL {old['kl_nats']:.2e} nats/token, loss {old['loss_before']:.4f} -> "
            f"{old['loss_after']:.4f} over {old['tokens']} tokens"
        )
    report(args, lines, None, result.out / RECORD_FILE)
    return 0
