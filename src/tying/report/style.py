"""One look for every figure: markers that keep coincident lines visible, plain tick labels.

Every line figure of tying (`tying plot`, the experiment report, the probe, the lens) draws
its series with `series_style(i, n)`: series i gets its own hollow marker shape, and on long
series (more than `MAX_MARKS` points) its markers sit at an offset of its own, so a line
drawn exactly over another still shows the markers of both. `coincident_pairs` names the
series that lie on one another at the figure's scale (`coincident_groups` groups them); the
figures mark them in the legend and the reports say so in the caption (`coincidence_note`). `plain_ticks` turns off
matplotlib's offset text (the `1e−5+9.999e−1` that otherwise sits above the axis, over the
title), so tick labels are the values themselves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: Marker shapes, one per series (cycled).
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: Markers drawn on one long series at most (more would hide the line).
MAX_MARKS = 12
#: Two series coincide when their largest difference is at most this fraction of the span of
#: all plotted values: on the reports' axes (~3.3 inches at 110-120 dpi, ~400 px) 1% is ~4 px,
#: a line's width (1.5 pt ≈ 2.5 px) and little more, so one line covers the other.
COINCIDENT_FRACTION = 0.01


def series_style(index: int, n_points: int, *, size: float = 6.0) -> dict[str, Any]:
    """Keyword arguments of `Axes.plot` for the `index`-th series of `n_points` points.

    Args:
        index: position of the series in the figure (0, 1, ...).
        n_points: its number of points.
        size: marker size (points).

    Returns:
        marker (its own shape, hollow: `markerfacecolor="none"`, so markers drawn over one
        another stay visible), markersize, and `markevery` = (offset, step) with
        step = ceil(n_points / MAX_MARKS) and offset = index mod step (series that coincide
        put their markers on different points).
    """
    every = max(1, math.ceil(n_points / MAX_MARKS))
    return {
        "marker": MARKERS[index % len(MARKERS)],
        "markersize": size,
        "markerfacecolor": "none",
        "markeredgewidth": 1.2,
        "markevery": (index % every, every),
    }


def _finite_pairs(a: Sequence[Any], b: Sequence[Any]) -> list[tuple[float, float]]:
    return [
        (float(x), float(y))
        for x, y in zip(a, b, strict=False)
        if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
    ]


def coincident_pairs(
    series: Mapping[str, Sequence[float | None]], fraction: float = COINCIDENT_FRACTION
) -> list[tuple[str, str, float]]:
    """Pairs of series that lie on one another at the scale of their common plot.

    Two series coincide when they have the same length and their largest absolute
    difference over the points where both are finite is at most `fraction` × the span
    (max − min) of all finite values of all series (or exactly 0 when that span is 0).

    Args:
        series: name -> values (None and non-finite values are ignored).
        fraction: the tolerance as a fraction of the span.

    Returns:
        (first name, later name, largest difference) per coincident pair, in the order of
        `series` (the later one is drawn over the first).
    """
    values = [
        float(v) for vals in series.values() for v in vals if v is not None and math.isfinite(v)
    ]
    if not values:
        return []
    tolerance = fraction * (max(values) - min(values))
    names = list(series)
    found = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if len(series[a]) != len(series[b]):
                continue
            pairs = _finite_pairs(series[a], series[b])
            if not pairs:
                continue
            diff = max(abs(x - y) for x, y in pairs)
            if diff <= tolerance:
                found.append((a, b, diff))
    return found


def coincident_groups(
    series: Mapping[str, Sequence[float | None]], fraction: float = COINCIDENT_FRACTION
) -> list[tuple[list[str], float]]:
    """The series that coincide, grouped: connected components of `coincident_pairs`.

    Returns:
        (names in the order of `series`, largest difference of a coincident pair within the
        group) per group of two or more series, ordered by their first name.
    """
    group_of = {name: i for i, name in enumerate(series)}
    worst: dict[int, float] = {}
    for a, b, diff in coincident_pairs(series, fraction):
        ga, gb = group_of[a], group_of[b]
        if ga != gb:
            for name, g in group_of.items():
                if g == gb:
                    group_of[name] = ga
            worst[ga] = max(worst.get(ga, 0.0), worst.pop(gb, 0.0))
        worst[ga] = max(worst.get(ga, 0.0), diff)
    groups = []
    for g in sorted(worst):
        names = [n for n in series if group_of[n] == g]
        groups.append((names, worst[g]))
    return groups


def coincidence_note(
    groups: Sequence[tuple[Sequence[str], float]],
    unit: str = "",
    fraction: float = COINCIDENT_FRACTION,
) -> str:
    """A caption sentence naming each group of coincident series, or "" when there are none.

    E.g. "teacher and teacher-tt-s0 stay within 1 bits/token of each other (under 1% of the
    axis): their lines cover one another; the distinct markers show each."
    """
    if not groups:
        return ""
    unit = f" {unit}" if unit else ""
    parts = []
    for names, diff in groups:
        who = (
            " and ".join(names) if len(names) == 2 else ", ".join(names[:-1]) + f" and {names[-1]}"
        )
        other = "each other" if len(names) == 2 else "one another"
        parts.append(f"{who} stay within {diff:.2g}{unit} of {other}")
    share = f"{fraction:.0%}"
    return (
        "; ".join(parts)
        + f" (under {share} of the axis): their lines cover one another; the distinct markers "
        "show each."
    )


def plain_ticks(ax: Any, axis: str = "both") -> None:
    """Tick labels as the values themselves: no offset text, no ×10ⁿ multiplier.

    Applies to the axes whose tick formatter is a `ScalarFormatter` (linear axes with
    automatic labels; log axes and fixed labels are left alone); `axis` is "x", "y" or
    "both".
    """
    from matplotlib.ticker import ScalarFormatter

    for name in ("x", "y") if axis == "both" else (axis,):
        formatter = (ax.xaxis if name == "x" else ax.yaxis).get_major_formatter()
        if isinstance(formatter, ScalarFormatter):
            formatter.set_useOffset(False)
            formatter.set_scientific(False)
