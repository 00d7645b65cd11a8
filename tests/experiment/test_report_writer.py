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
    assert format_value(0.000123456, 3) == "0.000123" and format_value(1.775e-17) == "1.775e-17"
    assert format_value(True) == "yes" and format_value(math.inf) == "inf"
    # integers: separators from 10,000 on
    assert format_value(9999) == "9999" and format_value(12345) == "12,345"
    assert format_value(1064960) == "1,064,960" and format_value(-10000) == "-10,000"
    # floats past `digits` integer digits: rounded and shown as integers, never 2.01e+03
    assert format_value(2010.5, 3) == "2010" and format_value(557.3, 3) == "557"
    assert format_value(70760.3) == "70,760" and format_value(9999.4) == "9999"
    assert format_value(5.279) == "5.279" and format_value(2.5e15) == "2.5e+15"


def test_wide_table_scrolls_in_its_own_box(tmp_path) -> None:
    """A 31-column table sits in a div.table-wrap with overflow-x: auto; the title is outside
    the box (page-wide), the separators reach both renderings."""
    from html.parser import HTMLParser

    columns = [Column("name", "model")] + [Column(f"e{i}", str(i)) for i in range(31)]
    rows = [{"name": "m", **{f"e{i}": 10_000 * i for i in range(31)}}]
    doc = Document("wide")
    doc.section("s").add(Table(columns, rows, title="KL per entry (`bits/token`)"))
    md_path, html_path = doc.write(tmp_path)
    page = html_path.read_text()

    class Nesting(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.stack: list[str] = []
            self.tables: list[list[str]] = []  # the classes of the elements around each table

        def handle_starttag(self, tag, attrs) -> None:
            if tag == "table":
                self.tables.append(list(self.stack))
            self.stack.append(f"{tag}.{dict(attrs).get('class', '')}")

        def handle_endtag(self, tag) -> None:
            while self.stack and not self.stack.pop().startswith(f"{tag}."):
                pass

    parser = Nesting()
    parser.feed(page)
    assert parser.tables == [["html.", "body.", "div.table-wrap"]]
    css = re.search(r"\.table-wrap \{([^}]*)\}", page).group(1)
    assert "overflow-x: auto" in css
    assert '<p class="table-title">KL per entry (<code>bits/token</code>)</p>' in page
    assert '<td class="num">300,000</td>' in page and ">9999<" not in page
    assert "| 300,000 |" in md_path.read_text()


def test_paragraph_markup_in_html(tmp_path) -> None:
    doc = Document("t", ["**Error:** `a < b` & c"])
    page = doc.html()
    assert "<p><strong>Error:</strong> <code>a &lt; b</code> &amp; c</p>" in page
    assert "**Error:** `a < b` & c" in doc.markdown(tmp_path)


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


def test_number_columns_are_right_aligned() -> None:
    rows = [
        {"name": "a", "n": 12_000, "share": "2.48 %", "mixed": "`x`", "flag": True},
        {"name": "b", "n": None, "share": "1e-05", "mixed": 3, "flag": False},
    ]
    keys = ("name", "n", "share", "mixed", "flag")
    table = Table([Column(k, k) for k in keys], rows)
    assert table.numeric() == [False, True, True, False, False]
    page = table.html()
    assert '<th class="num">n</th>' in page and "<th>name</th>" in page
    assert '<td class="num">12,000</td>' in page and "<td><code>x</code></td>" in page
    assert '<td class="num">–</td>' in page  # a missing number keeps its column's alignment


def _report(n_entries: int) -> dict:
    """A report.json dict of two teacher-mode runs and the teacher, lens over n_entries."""
    drift = {"steps": [2, 4, 6], "E": {"to_first": [1.0, 0.999998, 0.999997]}}
    drift["U"] = drift["E"]
    runs = [
        {
            "name": name,
            "mode": "teacher",
            "tie": tie,
            "steps": 6,
            "tokens": 1_064_960,
            "final_train_loss": 3.811,
            "curve": {"steps": [1, 2], "loss": [4.0, 3.9], "val_steps": [], "val_loss": []},
            "probe": {"drift": drift, "model": {"shares_matrix": tie == "tt"}},
        }
        for name, tie in (("teacher-tt-s0", "tt"), ("teacher-pit-s0", "pit"))
    ]
    kl = [100.0 - 3 * i for i in range(n_entries - 1)] + [0.0]
    records = [
        {"run": "teacher", "kind": "logit", "kl": kl},
        {"run": "teacher-tt-s0", "kind": "logit", "kl": [v + 0.5 for v in kl]},
        {"run": "teacher-pit-s0", "kind": "logit", "kl": [v / 2 for v in kl]},
    ]
    config = {"ties": ["tt", "pit"], "modes": ["teacher"], "seeds": [0]}
    return {"name": "demo", "config": config, "runs": runs, "lens": {"records": records}}


def test_experiment_report_tables_and_captions(tmp_path) -> None:
    """The lens table runs entries down the rows (31 rows, one column per model); the drift and
    lens captions name the series that cover one another; integers get separators."""
    from tying.experiment.render import build_document
    from tying.report import Table as ReportTable

    doc = build_document(_report(31), tmp_path)
    lens = next(s for s in doc.sections if s.title.startswith("Lens"))
    table = next(b for b in lens.blocks if isinstance(b, ReportTable))
    assert [c.header for c in table.columns] == [
        "entry",
        "teacher",
        "teacher-tt-s0",
        "teacher-pit-s0",
    ]
    cells = table.cells()
    assert len(cells) == 31 and cells[0] == ["emb", "100", "100.5", "50"]
    assert [row[0] for row in cells[1:3]] == ["1", "2"] and cells[-1] == ["30", "0", "0.5", "0"]
    # teacher-tt-s0 is 0.5 bits/token above the teacher: under 1% of the 100-bit span
    caption = next(b for b in lens.blocks if isinstance(b, Figure)).caption
    assert "teacher and teacher-tt-s0 stay within 0.5 bits/token of each other" in caption
    assert "teacher-pit-s0" not in caption
    drift = next(s for s in doc.sections if s.title.startswith("Drift"))
    caption = next(b for b in drift.blocks if isinstance(b, Figure)).caption
    assert "E and U of teacher-tt-s0 are one matrix" in caption
    assert "Panel E: teacher-tt-s0 and teacher-pit-s0 stay within 0 of each other" in caption
    md = doc.markdown(tmp_path)
    assert "ties tt, pit × modes teacher × seeds 0" in md and "['tt'" not in md
    assert "| teacher-tt-s0 | 6 | 1,064,960 | 3.811 |" in md
