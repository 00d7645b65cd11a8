"""Figures of lens results: KL(final ‖ lens) per entry for one or more models on one axis."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tying.lens.evaluate import entry_labels
from tying.report.style import coincident_groups, plain_ticks, series_style


def lens_kl_figure(
    records: Sequence[dict[str, Any]],
    *,
    title: str | None = None,
    per_byte: bool = False,
    log_y: bool = False,
) -> Any:
    """The `plot_lens_kl` figure (a matplotlib `Figure`, not saved); same arguments."""
    from matplotlib.figure import Figure

    key, unit = ("kl_bits_per_byte", "bits/byte") if per_byte else ("kl", "bits/token")
    usable = [r for r in records if r.get(key)]
    if not usable:
        raise ValueError(f"no records with {key!r} to plot")
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.subplots()
    longest = max(len(r[key]) for r in usable)
    names = [f"{r['name']} ({r.get('kind', '?')} lens)" for r in usable]
    kinds = {n: r.get("kind") for n, r in zip(names, usable, strict=True)}
    short = {n: r["name"] for n, r in zip(names, usable, strict=True)}
    on = {}  # later member of a coincident group -> its group's first member
    for group, _ in coincident_groups({n: r[key] for n, r in zip(names, usable, strict=True)}):
        first = group[0]
        for name in group[1:]:
            on[name] = short[first] if kinds[first] == kinds[name] else first
    for i, (name, r) in enumerate(zip(names, usable, strict=True)):
        values = r[key]
        ax.plot(
            range(len(values)),
            values,
            label=name + (f" ≈ {on[name]}" if name in on else ""),
            **series_style(i, len(values), size=5),
        )
    labels = entry_labels(longest)
    step = max(1, math.ceil(longest / 16))
    ticks = list(range(0, longest, step))
    if ticks[-1] != longest - 1:
        ticks.append(longest - 1)
    ax.set_xticks(ticks)
    ax.set_xticklabels([labels[t] for t in ticks])
    ax.set_xlabel("entry (emb = embedding output, i = output of block i)")
    ax.set_ylabel(f"KL(final ‖ lens) ({unit})")
    if log_y:
        ax.set_yscale("symlog", linthresh=0.1)
    ax.set_ylim(bottom=0)
    plain_ticks(ax, "y")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "KL(final ‖ lens) per layer")
    fig.tight_layout()
    return fig


def plot_lens_kl(
    records: Sequence[dict[str, Any]],
    path: str | Path,
    *,
    title: str | None = None,
    per_byte: bool = False,
    log_y: bool = False,
) -> Path:
    """Plot `lens.json` records: x = entry (emb, 1..L), y = KL(final ‖ lens).

    Each record has its own hollow marker shape (`tying.report.style.series_style`); a record
    whose curve lies on an earlier one's (`coincident_groups`) says so in its legend entry
    ("teacher-tt-s0 (logit lens) ≈ teacher"), since its line hides the other.

    Args:
        records: dicts with "name", "kind", "kl" (one value per entry) and, for `per_byte`,
            "kl_bits_per_byte".
        path: the PNG to write (parent folders are created).
        title: figure title (default: "KL(final ‖ lens) per layer").
        per_byte: plot bits/byte instead of bits/token (records without it are skipped).
        log_y: symmetric-log y axis (linear below 0.1), for KLs spanning decades; the last
            entry's 0 stays on the axis.

    Returns:
        The path written.

    Raises:
        ValueError: no records to plot.
    """
    fig = lens_kl_figure(records, title=title, per_byte=per_byte, log_y=log_y)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path
