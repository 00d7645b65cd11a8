"""`tying plot RUN [RUN ...] --metric NAME [--rolling N] [--out PNG]`: a metric of metrics.jsonl
against step; the plotted series beside the PNG, same name with .json (`--json` prints it)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.plot import PlotOptions

    # `json` (the series file's path) has no flag: the file sits beside the PNG, and `--json`
    # is every verb's flag (print the JSON instead of the summary)
    add_config_arguments(parser, PlotOptions, exclude=("json",))


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.config_flags import config_from_args
    from tying.options.plot import PlotOptions

    options = config_from_args(PlotOptions, args)  # checked before torch loads
    from tying.report.metrics_plot import plot_metrics

    result = plot_metrics(options)
    lines = []
    for s in result.series:
        mean = sum(s.values) / len(s.values)
        lines.append(
            f"{s.run.resolve().name}: {options.metric} over {len(s.values)} rows (steps "
            f"{s.steps[0]}..{s.steps[-1]}): mean {mean:.4g}, last {s.values[-1]:.4g}, last "
            f"rolling-{options.rolling} mean {s.smooth[-1]:.4g}"
        )
    lines.append(f"wrote {result.png} and {result.json_path}")
    report(args, lines, None, result.json_path)
    return 0
