"""`tying plot RUN [RUN ...] --metric NAME [--rolling N]`: a metric of metrics.jsonl against step.

Reads each run's metrics.jsonl (`tying.train.metrics.read_metrics`), keeps the rows that
carry the metric as a finite number, and plots it against `step`: the raw values faintly,
their trailing rolling mean (the last N logged values, fewer at the start) solid; several
runs share one axis. E.g. `--metric grad_out_share --rolling 20` (the output-side share of
the interface gradient; the weight-tying-bias paper, Figure 5, reports about 70% over
OLMo-1B's first 1,000 steps).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HELP = "plot a metric of one or more runs' metrics.jsonl against step (rolling mean)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folders (with metrics.jsonl)")
    parser.add_argument("--metric", required=True, help="a key of metrics.jsonl, e.g. loss")
    parser.add_argument(
        "--rolling", type=int, default=1, help="trailing rolling-mean window in rows (1 = off)"
    )
    parser.add_argument(
        "--max-step", type=int, default=None, help="plot only rows with step <= this"
    )
    parser.add_argument(
        "--out", default=None, help="PNG to write (default: <first RUN>/plot-<metric>.png)"
    )
    parser.add_argument(
        "--ylim",
        type=float,
        nargs=2,
        default=None,
        metavar=("LOW", "HIGH"),
        help="y-axis range (e.g. to see one run's detail beside a far-off one)",
    )
    parser.add_argument(
        "--json",
        default=None,
        metavar="PATH",
        help="also write the plotted series (steps, values, rolling mean per run) as JSON",
    )


def numeric_metrics(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The keys holding a number in at least one row, besides `step`."""
    keys = {
        k
        for row in rows
        for k, v in row.items()
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    return sorted(keys)


def run(args: argparse.Namespace) -> int:
    from matplotlib.figure import Figure

    from tying.train.metrics import metric_series, read_metrics, rolling_mean

    if args.rolling < 1:
        print("tying plot: error: --rolling must be >= 1", file=sys.stderr)
        return 2
    if args.ylim is not None and not args.ylim[0] < args.ylim[1]:
        low, high = args.ylim
        print(f"tying plot: error: --ylim needs LOW < HIGH, got {low} {high}", file=sys.stderr)
        return 2
    series = []
    for run_dir in args.runs:
        rows = read_metrics(run_dir)
        steps, values = metric_series(rows, args.metric, args.max_step)
        if not steps:
            available = ", ".join(numeric_metrics(rows)) or "none"
            print(
                f"tying plot: error: run {run_dir} has no values of {args.metric!r}"
                f"{' up to step ' + str(args.max_step) if args.max_step is not None else ''}; "
                f"metrics in its metrics.jsonl: {available}",
                file=sys.stderr,
            )
            return 2
        series.append((Path(run_dir), steps, values, rolling_mean(values, args.rolling)))

    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.subplots()
    for run_dir, steps, values, smooth in series:
        name = run_dir.resolve().name
        (line,) = ax.plot(steps, smooth, label=name, linewidth=1.6)
        if args.rolling > 1:
            ax.plot(steps, values, color=line.get_color(), alpha=0.25, linewidth=0.8)
        mean = sum(values) / len(values)
        print(
            f"{name}: {args.metric} over {len(values)} rows (steps {steps[0]}..{steps[-1]}): "
            f"mean {mean:.4g}, last {values[-1]:.4g}, last rolling-{args.rolling} mean "
            f"{smooth[-1]:.4g}"
        )
    ax.set_xlabel("step")
    ylabel = args.metric + (f" (rolling mean of {args.rolling})" if args.rolling > 1 else "")
    ax.set_ylabel(ylabel)
    if args.ylim is not None:
        ax.set_ylim(*args.ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(args.metric)
    fig.tight_layout()
    out = Path(args.out) if args.out else Path(args.runs[0]) / f"plot-{args.metric}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    if args.json:
        data = {
            "metric": args.metric,
            "rolling": args.rolling,
            "runs": [
                {"run": str(run_dir), "steps": steps, "values": values, "rolling_mean": smooth}
                for run_dir, steps, values, smooth in series
            ],
        }
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {path}")
    return 0
