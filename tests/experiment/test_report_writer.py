"""tying.report: Markdown and self-contained HTML; rolling mean of the gradient share."""

from __future__ import annotations

import base64
import math
import re

import pytest

from tying.experiment.analysis import seed_aggregates
from tying.report import Column, Document, Figure, Table, format_value


def _png(path) -> bytes:
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(2, 2))
    fig.subplots().plot([0, 1], [1, 0])
    fig.savefig(path)
    return path.read_bytes()


def test_markdown_and_html(tmp_path) -> None:
    (tmp_path / "figures").mkdir()
    data = _png(tmp_path / "figures" / "a.png")
    rows = [{"name": "tt", "loss": 3.14159265, "n": 7}, {"name": "pit <b>", "loss": None}]
    table = Table(
        [Column("name", "run"), Column("loss", "loss", "nats/token"), Column("n", "n")], rows
    )
    doc = Document("T & T", ["intro"])
    doc.section("S").add(table).add(Figure(tmp_path / "figures" / "a.png", "cap")).add("text")
    md_path, html_path = doc.write(tmp_path)
    md = md_path.read_text()
    lines = [line for line in md.splitlines() if line.startswith("|")]
    assert len(lines) == 2 + len(rows) and all(line.count("|") == 4 for line in lines)
    assert "loss (nats/token)" in lines[0] and "3.142" in lines[2] and "–" in lines[3]
    assert "![cap](figures/a.png)" in md
    page = html_path.read_text()
    embedded = re.search(r'src="data:image/png;base64,([^"]+)"', page).group(1)
    assert base64.b64decode(embedded) == data  # the PNG itself, not a link
    assert "pit &lt;b&gt;" in page and "T &amp; T" in page


def test_missing_figure_is_an_error(tmp_path) -> None:
    doc = Document("x")
    doc.section("s").add(Figure(tmp_path / "nope.png", "c"))
    with pytest.raises(FileNotFoundError, match="nope.png"):
        doc.write(tmp_path)


def test_format_value() -> None:
    assert format_value(None) == format_value(math.nan) == "–"
    assert format_value(12345) == "12345" and format_value(0.000123456, 3) == "0.000123"
    assert format_value(True) == "yes"


def test_seed_aggregates_group_by_mode_and_tie() -> None:
    runs = [
        {"mode": "scratch", "tie": tie, "seed": seed, "final_train_loss": loss, "val_loss": val}
        for tie, seed, loss, val in [
            ("tt", 0, 5.0, 5.5),
            ("pit", 0, 6.0, None),
            ("tt", 1, 4.0, 4.5),
            ("pit", 1, 7.0, 6.25),
        ]
    ]
    rows = seed_aggregates(runs)
    assert [(r["mode"], r["tie"], r["seeds"]) for r in rows] == [
        ("scratch", "tt", 2),
        ("scratch", "pit", 2),
    ]
    tt, pit = rows
    assert (
        tt["final_train_loss_mean"],
        tt["final_train_loss_min"],
        tt["final_train_loss_max"],
    ) == (
        4.5,
        4.0,
        5.0,
    )
    assert tt["val_loss_mean"] == 5.0
    assert (pit["val_loss_mean"], pit["val_loss_min"], pit["val_loss_max"]) == (6.25, 6.25, 6.25)
    assert pit["val_ppl_mean"] is None
