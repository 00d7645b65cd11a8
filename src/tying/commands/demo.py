"""`tying demo`: probe a teacher, continue it as TT and PIT, lens and probe both, report.

Writes OUT/report.html (self-contained), report.md and report.json, and prints a summary
table (`--json`: report.json instead). A second run reuses the tokenized shards (cache) and skips finished runs.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.demo import DemoOptions

    add_config_arguments(parser, DemoOptions)


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.config_flags import config_from_args
    from tying.options.demo import DemoOptions

    options = config_from_args(DemoOptions, args)  # checked before torch loads
    from tying.experiment.demo import demo_config, demo_summary, run_demo

    result = run_demo(demo_config(options), progress=options.progress)
    report(args, demo_summary(result), None, result.json_path)
    return 0
