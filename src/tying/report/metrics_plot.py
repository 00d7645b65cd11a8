"""`tying plot`: one metric of one or more runs' metrics.jsonl against step.

Keeps the rows that carry the metric as a finite number and plots it against `step`: the
raw values faintly, their trailing rolling mean (the last N logged values, fewer at the
start) solid; several runs share one axis, each with its own marker so a line hidden under
an identical one stays visible. E.g. `--metric grad_out_share --rolling 20` (the output-side
share of the interface gradient; the weight-tying-bias paper, Figure 5, reports about 70%
over OLMo-1B's first 1,000 steps).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tying.errors import InvalidInputError
from tying.options.plot import PlotOptions as PlotOptions
from tying.report.style import MARKERS, plain_ticks, series_style
from tying.train.metrics import metric_label, metric_series, read_metrics, rolling_mean

__all__ = ["MARKERS", "PlotOptions", "PlotResult", "Series", "metrics_figure", "plot_metrics"]


def numeric_metrics(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The keys holding a number in at least one row, besides `step`."""
    keys = {
        k
        for row in rows
        for k, v in row.items()
        if k != "step" and isinstance(v, int | float) and not isinstance(v, bool)
    }
    return sorted(keys)


@dataclass
class Series:
    """One run's plotted series."""

    run: Path
    steps: list[int]
    values: list[float]
    smooth: list[float] = field(default_factory=list)


@dataclass
class PlotResult:
    """What `plot_metrics` wrote, and the series it plotted."""

    png: Path
    json_path: Path
    series: list[Series]


def _ylabel(metric: str, rolling: int) -> str:
    """The y label, unit last: "loss, rolling mean of 20 (nats/token)"."""
    name, paren, unit = metric_label(metric).partition(" (")
    if rolling > 1:
        name += f", rolling mean of {rolling}"
    return name + paren + unit


def metrics_figure(series: Sequence[Series], options: PlotOptions) -> Any:
    """The `plot_metrics` figure of the read series (a matplotlib `Figure`, not saved)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.subplots()
    for i, s in enumerate(series):
        (line,) = ax.plot(
            s.steps,
            s.smooth,
            label=s.run.resolve().name,
            linewidth=1.6,
            **series_style(i, len(s.steps), size=5),
        )
        if options.rolling > 1:
            ax.plot(s.steps, s.values, color=line.get_color(), alpha=0.25, linewidth=0.8)
    ax.set_xlabel("step (optimizer steps)")
    ax.set_ylabel(_ylabel(options.metric, options.rolling))
    if options.ylim is not None:
        ax.set_ylim(*options.ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(options.metric)
    plain_ticks(ax)
    fig.tight_layout()
    return fig


def plot_metrics(options: PlotOptions) -> PlotResult:
    """Plot `options.metric` of every run (see the module docstring).

    Raises:
        ValueError: a run without values of the metric (the message lists the ones it has).
    """
    series = []
    for run_dir in options.runs:
        rows = read_metrics(run_dir)
        steps, values = metric_series(rows, options.metric, options.max_step)
        if not steps:
            available = ", ".join(numeric_metrics(rows)) or "none"
            upto = f" up to step {options.max_step}" if options.max_step is not None else ""
            raise InvalidInputError(
                f"run {run_dir} has no values of {options.metric!r}{upto}; metrics in its "
                f"metrics.jsonl: {available}"
            )
        series.append(Series(Path(run_dir), steps, values, rolling_mean(values, options.rolling)))

    fig = metrics_figure(series, options)
    out = Path(options.out) if options.out else Path(options.runs[0]) / f"plot-{options.metric}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    # the plotted series, beside the PNG (same name, .json) unless `options.json` names a file
    data = {
        "metric": options.metric,
        "unit": metric_label(options.metric),
        "rolling": options.rolling,
        "runs": [
            {"run": str(s.run), "steps": s.steps, "values": s.values, "rolling_mean": s.smooth}
            for s in series
        ],
    }
    json_path = Path(options.json) if options.json else out.with_suffix(".json")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(data, indent=1) + "\n")
    return PlotResult(out, json_path, series)
