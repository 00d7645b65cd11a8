"""Figures of the experiment report (matplotlib, PNG): curves, gradient share, lens, drift.

Every line has its own hollow marker (`tying.report.style.series_style`), so a run drawn
over an identical one stays visible; every axis names its unit in parentheses; tick labels
are plain numbers (no offset text over the title).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tying.report.style import coincident_groups, plain_ticks, series_style

#: y-axis label of the drift panels.
DRIFT_LABEL = "mean cosine to first checkpoint (unitless)"


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def learning_curves_figure(runs: list[dict[str, Any]], title: str) -> Any:
    """The `plot_learning_curves` figure (a matplotlib `Figure`, not saved)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.subplots()
    for i, run in enumerate(runs):
        curve = run["curve"]
        style = series_style(i, len(curve["steps"]), size=5)
        line = ax.plot(curve["steps"], curve["loss"], linewidth=1.2, label=run["name"], **style)
        if curve["val_steps"]:
            ax.plot(
                curve["val_steps"],
                curve["val_loss"],
                linestyle="--",
                color=line[0].get_color(),
                label=f"{run['name']} (val)",
                **{**series_style(i, len(curve["val_steps"]), size=7), "markevery": None},
            )
    ax.set_xlabel("step (optimizer steps)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    plain_ticks(ax)
    return fig


def plot_learning_curves(runs: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Training loss (solid) and validation loss (dashed) per run against the step."""
    return _save(learning_curves_figure(runs, title), path)


def grad_share_figure(runs: list[dict[str, Any]]) -> Any:
    """The `plot_grad_share` figure (a matplotlib `Figure`, not saved)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.subplots()
    for i, run in enumerate(runs):
        share = run["grad_out_share"]
        line = ax.plot(share["steps"], share["share"], alpha=0.3, linewidth=0.8)
        ax.plot(
            share["steps"],
            share["smoothed"],
            color=line[0].get_color(),
            label=f"{run['name']} (mean of {share['window']} steps)",
            **series_style(i, len(share["steps"]), size=5),
        )
    ax.set_xlabel("step (optimizer steps)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("output-side share of the gradient (fraction)")
    ax.set_ylim(0, 1)
    ax.set_title("output-side share ‖g_out‖ / (‖g_in‖ + ‖g_out‖) of the interface gradient")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    plain_ticks(ax)
    return fig


def plot_grad_share(runs: list[dict[str, Any]], path: Path) -> Path:
    """`grad_out_share` = ‖g_out‖ / (‖g_in‖ + ‖g_out‖) of the interface gradient, first steps.

    For an untied interface the two sides are the separate matrices W_out and E; for TT and
    PIT they are the two paths into the shared parameters (docs/interface.md).
    """
    return _save(grad_share_figure(runs), path)


#: The drift panels: matrix key of probe.json's drift block -> panel title.
DRIFT_PANELS = {"E": "input matrix E", "U": "output matrix U = W_outᵀ"}


def drift_coincidences(runs: list[dict[str, Any]]) -> dict[str, list[tuple[list[str], float]]]:
    """Per drift panel ("E", "U"): the groups of runs whose curves lie on one another (see
    `tying.report.style.coincident_groups`; the span is that of the panel's values)."""
    return {
        label: coincident_groups(
            {run["name"]: run["probe"]["drift"][label]["to_first"] for run in runs}
        )
        for label in DRIFT_PANELS
    }


def drift_figure(runs: list[dict[str, Any]]) -> Any:
    """The `plot_drift_runs` figure (a matplotlib `Figure`, not saved)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(10, 4.2), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for i, run in enumerate(runs):
        drift = run["probe"]["drift"]
        for ax, label in zip(axes, DRIFT_PANELS, strict=True):
            ax.plot(
                drift["steps"],
                drift[label]["to_first"],
                label=run["name"],
                **series_style(i, len(drift["steps"]), size=7),
            )
    for ax, label in zip(axes, DRIFT_PANELS.values(), strict=True):
        ax.set_title(f"drift of the {label}")
        ax.set_xlabel("checkpoint step (optimizer steps)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(DRIFT_LABEL)
        ax.grid(alpha=0.3)
        plain_ticks(ax)
    axes[1].legend(fontsize=8)
    return fig


def plot_drift_runs(runs: list[dict[str, Any]], path: Path) -> Path:
    """Mean per-token cosine of E and U to the first checkpoint, per run (plain tick labels:
    a drift of 1e-5 reads 0.99999, not an offset over the title)."""
    return _save(drift_figure(runs), path)
