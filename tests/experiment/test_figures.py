"""Every figure of the reports: units on the y axes, markers that keep coincident lines apart,
plain tick labels (no offset text over the title), and the coincidence test behind the notes.

The figures are checked as matplotlib objects (labels, markers, tick texts), not as pixels.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from tying.experiment import plots as experiment_plots
from tying.lens.plots import lens_kl_figure
from tying.probe import plots as probe_plots
from tying.report.metrics_plot import PlotOptions, Series, metrics_figure
from tying.report.style import (
    COINCIDENT_FRACTION,
    coincidence_note,
    coincident_groups,
    coincident_pairs,
    plain_ticks,
    series_style,
)

#: Units an axis may name (the first item of its last parenthesis).
UNITS = {
    "nats/token",
    "bits/token",
    "bits/byte",
    "fraction",
    "unitless",
    "weight units",
    "tokens",
    "tokens/s",
    "s",
}

#: A drift of 1e-5 (the demo's TT run after a few steps): matplotlib's default formatter
#: labels this axis with an offset ("1e-5+9.999e-1") drawn above it, over the title.
TINY_DRIFT = [1.0, 0.999995, 0.99999, 0.999989]


def _run(name: str, drift: list[float], n: int = 40) -> dict:
    steps = list(range(1, n + 1))
    return {
        "name": name,
        "curve": {
            "steps": steps,
            "loss": [5 + 1 / s for s in steps],
            "val_steps": [10, 20, 40],
            "val_loss": [5.5, 5.2, 5.1],
        },
        "grad_out_share": {
            "steps": steps,
            "share": [0.7] * n,
            "smoothed": [0.7] * n,
            "window": 5,
        },
        "probe": {
            "drift": {
                "steps": [10, 20, 30, 40],
                "E": {"to_first": drift, "to_previous": drift[1:]},
                "U": {"to_first": drift, "to_previous": drift[1:]},
            }
        },
    }


def _figures() -> dict[str, object]:
    """One figure of every figure function, on small synthetic inputs."""
    runs = [_run("tt", TINY_DRIFT), _run("teacher", TINY_DRIFT)]
    points = {
        label: {"norm": torch.rand(50) + 1, "log_frequency": -torch.rand(50) * 10}
        for label in ("E", "U")
    }
    drift = runs[0]["probe"]["drift"]
    lens = [
        {"name": "teacher", "kind": "logit", "kl": [9.0 - 0.3 * i for i in range(31)]},
        {"name": "tt", "kind": "logit", "kl": [9.0 - 0.3 * i for i in range(31)]},
    ]
    series = [Series(Path("a"), [1, 2, 3], [3.0, 2.0, 1.0], [3.0, 2.5, 2.0])]
    return {
        "learning curves": experiment_plots.learning_curves_figure(runs, "t"),
        "gradient share": experiment_plots.grad_share_figure(runs),
        "experiment drift": experiment_plots.drift_figure(runs),
        "norm frequency": probe_plots.norm_frequency_figure(points, {"E": 0.5, "U": 0.4}),
        "probe drift": probe_plots.drift_figure(drift["steps"], {"E": drift["E"]}),
        "spectra": probe_plots.spectra_figure({"E": [3.0, 2.0, 1.0], "U": [4.0, 1.0, 0.5]}),
        "lens": lens_kl_figure(lens),
        "lens per byte": lens_kl_figure(
            [{**r, "kl_bits_per_byte": r["kl"]} for r in lens], per_byte=True, log_y=True
        ),
        "tying plot": metrics_figure(series, PlotOptions(runs=["a"], metric="loss", rolling=2)),
    }


def _draw(fig) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()


@pytest.fixture(scope="module")
def figures() -> dict[str, object]:
    figs = _figures()
    for fig in figs.values():
        _draw(fig)
    return figs


def test_every_axes_names_its_unit(figures) -> None:
    for name, fig in figures.items():
        for ax in fig.axes:
            label = ax.get_ylabel()
            match = re.search(r"\(([^()]*)\)$", label)
            assert match, f"{name}: y label {label!r} does not end with (unit)"
            unit = match.group(1).split(",")[0].strip()
            assert unit in UNITS, f"{name}: {unit!r} of {label!r} is not a unit"
            assert ax.get_xlabel(), f"{name}: no x label"


def test_no_offset_text_and_plain_tick_labels(figures) -> None:
    for name, fig in figures.items():
        for ax in fig.axes:
            for axis in (ax.xaxis, ax.yaxis):
                assert axis.get_offset_text().get_text() == "", name
    # the drift panels label 1e-5 differences with the values themselves
    ax = figures["experiment drift"].axes[0]
    labels = [t.get_text().replace("−", "-") for t in ax.get_yticklabels()]
    values = [float(t) for t in labels if t]
    assert len(set(labels)) == len(labels) and all(0.99998 <= v <= 1.00001 for v in values)
    assert any(v != 1.0 for v in values)


def test_tiny_drift_has_an_offset_without_plain_ticks() -> None:
    """The control: the same data on matplotlib's defaults does get the offset text, so the
    test above would catch a figure that skipped `plain_ticks`."""
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.subplots()
    ax.plot([10, 20, 30, 40], TINY_DRIFT)
    _draw(fig)
    assert ax.yaxis.get_offset_text().get_text() != ""
    plain_ticks(ax)
    _draw(fig)
    assert ax.yaxis.get_offset_text().get_text() == ""


def test_coincident_lines_keep_distinct_markers(figures) -> None:
    """teacher and tt have the same KL curve: the later line hides the earlier, so their
    markers differ in shape and position, are hollow, and the legend says which lies on which."""
    ax = figures["lens"].axes[0]
    first, second = ax.get_lines()[:2]
    assert (first.get_xydata() == second.get_xydata()).all()
    assert first.get_marker() != second.get_marker()
    assert first.get_markerfacecolor() == second.get_markerfacecolor() == "none"
    (o1, e1), (o2, e2) = first.get_markevery(), second.get_markevery()
    assert e1 == e2 == math.ceil(31 / 12) and o1 != o2
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts == ["teacher (logit lens)", "tt (logit lens) ≈ teacher"]
    for name in ("experiment drift", "learning curves", "gradient share", "probe drift"):
        for ax in figures[name].axes:
            markers = [line.get_marker() for line in ax.get_lines() if line.get_marker() != "None"]
            assert len(markers) >= 2, name


def test_series_style_spreads_markers() -> None:
    styles = [series_style(i, 31) for i in range(3)]
    assert [s["markevery"] for s in styles] == [(0, 3), (1, 3), (2, 3)]
    assert len({s["marker"] for s in styles}) == 3
    assert series_style(5, 4)["markevery"] == (0, 1)  # short series: every point


def test_coincident_pairs_and_groups_by_hand() -> None:
    series = {
        "a": [0.0, 1.0, 2.0],
        "b": [0.0, 1.0, 2.004],
        "c": [0.0, 1.0, 2.05],  # span of all: 2.05, tolerance 0.01 * 2.05 = 0.0205
        "d": [0.0, 1.0],  # another length: never paired
        "e": [None, 1.0, float("nan")],  # compared where finite: at 1.0 only
    }
    pairs = coincident_pairs(series)
    # a-b differ by 0.004 (kept), a-c by 0.05 and b-c by 0.046 (apart), e by 0 where finite
    assert [(a, b) for a, b, _ in pairs] == [("a", "b"), ("a", "e"), ("b", "e"), ("c", "e")]
    assert pairs[0][2] == pytest.approx(0.004) and pairs[1][2] == 0.0
    assert coincident_pairs({"x": [1.0, 1.0], "y": [1.0, 1.0]}) == [("x", "y", 0.0)]
    assert coincident_pairs({"x": [1.0, 1.0], "y": [1.0, 1.0 + 1e-12]}) == []  # span 1e-12
    assert COINCIDENT_FRACTION == 0.01

    # groups: connected components, with the largest difference of their pairs
    lines = {
        "p": [0.0, 10.0],
        "q": [0.05, 10.0],
        "r": [5.0, 3.0],
        "s": [0.0, 10.09],  # span 10.09, tolerance 0.1009: 0.09 from p and from q
        "t": [5.0, 3.05],
    }
    groups = coincident_groups(lines)
    assert [g for g, _ in groups] == [["p", "q", "s"], ["r", "t"]]
    assert groups[0][1] == pytest.approx(0.09) and groups[1][1] == pytest.approx(0.05)
    assert coincident_groups({"x": [0.0, 1.0], "y": [1.0, 0.0]}) == []
    # a chain: x-y and y-z coincide (0.08 <= 0.1016), x-z do not (0.16): one group
    chain = coincident_groups({"x": [0.0, 10.0], "y": [0.0, 10.08], "z": [0.0, 10.16]})
    assert chain == [(["x", "y", "z"], pytest.approx(0.08))]

    assert coincidence_note([]) == ""
    note = coincidence_note([(["teacher", "tt"], 0.0021)], "bits/token")
    assert note.startswith("teacher and tt stay within 0.0021 bits/token of each other")
    note = coincidence_note(groups)
    assert note.startswith("p, q and s stay within 0.09 of one another; r and t stay within 0.05")
    assert "(under 1% of the axis)" in note
