"""`tying probe SPEC [--against SPEC2] [--corpus PATH] --out DIR`: every view of a token interface.

Writes DIR/probe.json (the numbers; layout in docs/metrics.md, "probe.json"; `--json` prints
it), DIR/probe.md and
DIR/probe.html (tables with units, plots) and PNG plots. Stage timings go to stderr (the log;
`tying -q probe ...` hides them). Exit
status: 0; 1 when a block failed (its {"error": ...} is in probe.json); 2 for bad arguments or
a model that does not load.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.probe import ProbeOptions

    add_config_arguments(parser, ProbeOptions)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: one per core; 1 can be faster on a busy machine)",
    )


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.config_flags import config_from_args
    from tying.errors import InvalidInputError
    from tying.options.probe import ProbeOptions

    options = config_from_args(ProbeOptions, args)  # checked before torch loads
    if args.threads is not None and args.threads < 1:
        raise InvalidInputError(f"--threads must be >= 1, got {args.threads}")
    import torch

    from tying.probe import run_probe

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    result = run_probe(options)
    timings = result.report["timings_s"]
    line = (
        f"wrote {result.json_path}, {result.markdown_path}, {result.html_path} and "
        f"{len(result.plots)} plot(s) in {timings['total']:.1f} s"
    )
    report(args, [line], None, result.json_path)
    if result.errors:
        print(
            f"tying probe: {len(result.errors)} block(s) failed: {', '.join(result.errors)} "
            "(see probe.json)",
            file=sys.stderr,
        )
        return 1
    return 0
