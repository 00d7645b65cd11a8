"""`tying trace SPEC --prompt TEXT`: input- vs output-side anchors of one token, per layer.

For the traced token at every entry (emb, 1..L): the top-k tokens by cosine of the residual
state to the rows of E (input side) and by the logit lens (output side), and whether they
agree (PIT paper §3.1, Figure 2). Prints a table; writes trace.json (`--json` prints it) and
trace.png.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.lens import TraceOptions

    add_config_arguments(parser, TraceOptions)


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.config_flags import config_from_args
    from tying.options.lens import TraceOptions

    options = config_from_args(TraceOptions, args)  # checked before torch loads
    from tying.lens.pipeline import run_trace

    result = run_trace(options)
    report(
        args,
        [result.table, f"wrote {result.json_path} and {result.plot_path}"],
        None,
        result.json_path,
    )
    return 0
