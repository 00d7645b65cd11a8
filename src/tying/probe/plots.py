"""PNG figures of the probe (matplotlib, no display needed: `Figure` + Agg canvas).

Each `plot_*` saves the figure its `*_figure` builds. Axes name their units in parentheses
(weight units: the units of the stored matrix entries); lines have their own hollow markers
(`tying.report.style`); tick labels are plain numbers (no offset text).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import Tensor

from tying.report.style import plain_ticks, series_style


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def norm_frequency_figure(
    points: Mapping[str, Mapping[str, Tensor]], rho: Mapping[str, float], *, title: str = ""
) -> Any:
    """The `plot_norm_frequency` figure (a matplotlib `Figure`, not saved)."""
    from matplotlib.figure import Figure

    labels = list(points)
    fig = Figure(figsize=(5.0 * len(labels), 4.2), layout="constrained")
    axes = fig.subplots(1, len(labels), squeeze=False)[0]
    for ax, label in zip(axes, labels, strict=True):
        p = points[label]
        # Many tokens: small translucent dots that show density; few: visible markers.
        size, alpha = (2, 0.25) if len(p["norm"]) > 5_000 else (8, 0.6)
        ax.scatter(p["log_frequency"].numpy(), p["norm"].numpy(), s=size, alpha=alpha, linewidths=0)
        ax.set_xlabel("log relative frequency ln(count / N) (nats)")
        ax.set_ylabel(f"row norm ‖{label.split()[0]}[v]‖₂ (weight units)")
        ax.set_title(f"{label}: Spearman ρ = {rho[label]:.3f} (n = {len(p['norm']):,})")
        ax.grid(alpha=0.3)
        plain_ticks(ax)
    if title:
        fig.suptitle(title)
    return fig


def plot_norm_frequency(
    points: Mapping[str, Mapping[str, Tensor]],
    rho: Mapping[str, float],
    path: str | Path,
    *,
    title: str = "",
) -> Path:
    """One scatter panel per matrix: row norm ‖X[v]‖₂ against log relative frequency.

    Args:
        points: matrix label ("E", "U") -> {"norm": (n,), "log_frequency": (n,)} (the
            `norm_frequency(..., return_points=True)["points"]` of that matrix).
        rho: matrix label -> Spearman ρ (shown in the panel title).
        path: the PNG to write.
        title: figure title.

    Returns:
        The path written.
    """
    return _save(norm_frequency_figure(points, rho, title=title), path)


def drift_figure(steps: Sequence[int], curves: Mapping[str, Mapping[str, Sequence[float]]]) -> Any:
    """The `plot_drift` figure (a matplotlib `Figure`, not saved)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(7.0, 4.2), layout="constrained")
    ax = fig.subplots()
    for i, (label, d) in enumerate(curves.items()):
        line = ax.plot(
            steps, d["to_first"], label=f"{label}: to first", **series_style(2 * i, len(steps))
        )
        ax.plot(
            steps[1:],
            d["to_previous"],
            linestyle="--",
            color=line[0].get_color(),
            label=f"{label}: to previous",
            **series_style(2 * i + 1, len(steps) - 1),
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("checkpoint step (optimizer steps)")
    ax.set_ylabel("mean cosine per token (unitless)")
    ax.set_title("drift of the token matrices across checkpoints")
    ax.grid(alpha=0.3)
    ax.legend()
    plain_ticks(ax)
    return fig


def plot_drift(
    steps: Sequence[int], curves: Mapping[str, Mapping[str, Sequence[float]]], path: str | Path
) -> Path:
    """Mean per-token cosine to the first and to the previous checkpoint, against the step.

    Tick labels are plain (a drift of 1e-5 reads 0.99999, not as an offset over the title).

    Args:
        steps: the checkpoint steps (n + 1).
        curves: matrix label -> `drift(...)` result ("to_first": n + 1 values,
            "to_previous": n values, plotted at steps[1:]).
        path: the PNG to write.

    Returns:
        The path written.
    """
    return _save(drift_figure(steps, curves), path)


def spectra_figure(spectra: Mapping[str, Sequence[float]]) -> Any:
    """The `plot_spectra` figure (a matplotlib `Figure`, not saved)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.2), layout="constrained")
    ax = fig.subplots()
    for i, (label, values) in enumerate(spectra.items()):
        ax.plot(range(1, len(values) + 1), values, label=label, **series_style(i, len(values)))
    ax.set_yscale("log")
    ax.set_xlabel("index i (largest first)")
    ax.set_ylabel("singular value σ_i (weight units)")
    ax.set_title("singular value spectra")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    plain_ticks(ax, "x")
    return fig


def plot_spectra(spectra: Mapping[str, Sequence[float]], path: str | Path) -> Path:
    """Singular values σ_1 ≥ ... ≥ σ_d of each matrix, log scale.

    Args:
        spectra: label (e.g. "E", "U") -> singular values in decreasing order.
        path: the PNG to write.

    Returns:
        The path written.
    """
    return _save(spectra_figure(spectra), path)
