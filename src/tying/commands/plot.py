"""`tying plot RUN [RUN ...] --metric NAME [--rolling N]`: a metric of metrics.jsonl against step."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.plot import PlotOptions

    add_config_arguments(parser, PlotOptions)


def run(args: argparse.Namespace) -> int:
    from tying.config_flags import config_from_args
    from tying.options.plot import PlotOptions

    options = config_from_args(PlotOptions, args)  # checked before torch loads
    from tying.report.metrics_plot import plot_metrics

    result = plot_metrics(options)
    for s in result.series:
        mean = sum(s.values) / len(s.values)
        print(
            f"{s.run.resolve().name}: {options.metric} over {len(s.values)} rows (steps "
            f"{s.steps[0]}..{s.steps[-1]}): mean {mean:.4g}, last {s.values[-1]:.4g}, last "
            f"rolling-{options.rolling} mean {s.smooth[-1]:.4g}"
        )
    print(f"wrote {result.png}" + (f" and {result.json_path}" if result.json_path else ""))
    return 0
