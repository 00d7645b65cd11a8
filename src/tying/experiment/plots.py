"""Figures of the experiment report (matplotlib, PNG): curves, gradient share, lens, drift."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def plot_learning_curves(runs: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Training loss (lines) and validation loss (dashed, markers) per run against the step."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.subplots()
    for run in runs:
        curve = run["curve"]
        line = ax.plot(curve["steps"], curve["loss"], linewidth=1.2, label=run["name"])
        if curve["val_steps"]:
            ax.plot(
                curve["val_steps"],
                curve["val_loss"],
                marker="o",
                linestyle="--",
                color=line[0].get_color(),
                label=f"{run['name']} (val)",
            )
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_grad_share(runs: list[dict[str, Any]], path: Path) -> Path:
    """`grad_out_share` = ‖g_out‖ / (‖g_in‖ + ‖g_out‖) of the interface gradient, first steps.

    For an untied interface the two sides are the separate matrices W_out and E; for TT and
    PIT they are the two paths into the shared parameters (docs/interface.md).
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.subplots()
    for run in runs:
        share = run["grad_out_share"]
        line = ax.plot(share["steps"], share["share"], alpha=0.3, linewidth=0.8)
        ax.plot(
            share["steps"],
            share["smoothed"],
            color=line[0].get_color(),
            label=f"{run['name']} (mean of {share['window']} steps)",
        )
    ax.set_xlabel("step")
    ax.set_ylabel("output-side share ‖g_out‖ / (‖g_in‖ + ‖g_out‖)")
    ax.set_ylim(0, 1)
    ax.set_title("output-side share of the interface gradient")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_drift_runs(runs: list[dict[str, Any]], path: Path) -> Path:
    """Mean per-token cosine of E and U to the first checkpoint, per run."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.2), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for run in runs:
        drift = run["probe"]["drift"]
        for ax, label in zip(axes, ("E", "U"), strict=True):
            ax.plot(drift["steps"], drift[label]["to_first"], marker="o", label=run["name"])
    for ax, label in zip(axes, ("input matrix E", "output matrix U = W_outᵀ"), strict=True):
        ax.set_title(f"drift of the {label}")
        ax.set_xlabel("checkpoint step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean cosine to the first checkpoint")
    axes[1].legend(fontsize=8)
    return _save(fig, path)
