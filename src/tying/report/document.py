"""A report as sections of paragraphs, tables and figures, rendered to Markdown and HTML.

Markdown links figures relatively (`![caption](figures/x.png)`); HTML embeds them as
base64 `data:image/png` URIs, so `report.html` is one self-contained file.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tying.errors import MissingFileError

_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ccc; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
.table-title { font-weight: 600; margin: 1em 0 .3em; }
.table-wrap { overflow-x: auto; max-width: 100%; margin: 0 0 1em; }
table { border-collapse: collapse; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
td { white-space: nowrap; } .num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f2f2f2; vertical-align: bottom; }
figure { margin: 1.2em 0; } img { max-width: 100%; } figcaption { color: #555; font-size: .9em; }
code { font-size: .92em; background: #f4f4f4; padding: 0 .2em; }
.note { color: #555; font-size: .9em; }
"""

#: Integers from this magnitude up get thousands separators (1,064,960; 9999 stays 9999).
SEPARATOR_FROM = 10_000


def format_value(value: Any, digits: int = 4) -> str:
    """A table cell.

    None and NaN as "–"; booleans as yes/no; integers as is, with thousands separators from
    `SEPARATOR_FROM` (10,000) on; floats with `digits` significant digits, except that a
    float of magnitude ≥ 10^digits (where `g` would switch to 1.234e+05) is rounded to an
    integer and shown like one (2010.5 → "2010" for digits=3, 70760.3 → "70,760"); ±inf as
    "inf"/"-inf"; anything else as `str`.
    """
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= SEPARATOR_FROM else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–" if math.isnan(value) else str(value)
        if 10**digits <= abs(value) < 1e15:
            return format_value(round(value), digits)
        return f"{value:.{digits}g}"
    return str(value)


_NUMBER = re.compile(r"[-+]?[\d.,]+(e[-+]?\d+)?( ?%)?")


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) or (
        isinstance(value, str) and _NUMBER.fullmatch(value) is not None
    )


def inline_html(text: str) -> str:
    """Escaped HTML of a Markdown-light paragraph: `code` and **bold** become tags."""
    out = html.escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


@dataclass
class Column:
    """One table column: `key` of the row dicts, its title and unit (shown as "title (unit)")."""

    key: str
    title: str
    unit: str | None = None
    digits: int = 4

    @property
    def header(self) -> str:
        return f"{self.title} ({self.unit})" if self.unit else self.title


@dataclass
class Table:
    """Rows (dicts) shown under columns; a missing key is shown as "–"."""

    columns: Sequence[Column]
    rows: Sequence[dict[str, Any]]
    title: str | None = None
    note: str | None = None

    def cells(self) -> list[list[str]]:
        """The formatted cells, one list per row."""
        return [[format_value(r.get(c.key), c.digits) for c in self.columns] for r in self.rows]

    def markdown(self) -> str:
        lines = [f"**{self.title}**", ""] if self.title else []
        lines.append("| " + " | ".join(c.header for c in self.columns) + " |")
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in self.cells()]
        if self.note:
            lines += ["", f"_{self.note}_"]
        return "\n".join(lines)

    def numeric(self) -> list[bool]:
        """Per column: whether every value present is a number (bools are not) or a string
        that reads as one ("2.48 %"); such columns are right-aligned in HTML, others left."""
        return [
            all(_is_number(v) for r in self.rows if (v := r.get(c.key)) is not None)
            for c in self.columns
        ]

    def html(self) -> str:
        """The table in its own horizontally scrolling box (`div.table-wrap`), the title above
        it at the page's width, the note below: a table wider than the page scrolls inside
        its box instead of overflowing the page. Number columns are right-aligned
        (`class="num"`), text columns left-aligned; `code` in a cell becomes a tag."""
        numeric = self.numeric()
        cls = ['<th class="num">' if n else "<th>" for n in numeric]
        out = []
        if self.title:
            out.append(f'<p class="table-title">{inline_html(self.title)}</p>')
        out.append('<div class="table-wrap"><table>')
        out.append(
            "<tr>"
            + "".join(
                f"{t}{html.escape(c.header)}</th>" for t, c in zip(cls, self.columns, strict=True)
            )
            + "</tr>"
        )
        tds = ['<td class="num">' if n else "<td>" for n in numeric]
        for row in self.cells():
            out.append(
                "<tr>"
                + "".join(f"{t}{inline_html(v)}</td>" for t, v in zip(tds, row, strict=True))
                + "</tr>"
            )
        out.append("</table></div>")
        if self.note:
            out.append(f'<p class="note">{inline_html(self.note)}</p>')
        return "\n".join(out)


@dataclass
class Figure:
    """A PNG file and its caption."""

    path: Path
    caption: str

    def markdown(self, root: Path) -> str:
        try:
            rel = Path(self.path).resolve().relative_to(root.resolve())
        except ValueError:
            rel = Path(self.path)
        return f"![{self.caption}]({rel.as_posix()})"

    def html(self) -> str:
        path = Path(self.path)
        if not path.is_file():
            raise MissingFileError(f"figure {path} does not exist: write the PNG before the report")
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return (
            f'<figure><img alt="{html.escape(self.caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{inline_html(self.caption)}</figcaption></figure>"
        )


Block = str | Table | Figure


@dataclass
class Section:
    """A titled list of blocks: paragraphs, tables, figures.

    A paragraph is a str, Markdown-light: plain text with `code` and **bold** (kept as is in
    Markdown, turned into tags in HTML).
    """

    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, block: Block) -> Section:
        self.blocks.append(block)
        return self


class Document:
    """A report: title, intro paragraphs and sections; written as report.md and report.html."""

    def __init__(self, title: str, intro: Sequence[str] = ()) -> None:
        self.title = title
        self.intro = list(intro)
        self.sections: list[Section] = []

    def section(self, title: str) -> Section:
        """A new section appended to the document."""
        sec = Section(title)
        self.sections.append(sec)
        return sec

    def markdown(self, root: Path) -> str:
        """Markdown text; figure links are relative to `root` (the folder of report.md)."""
        parts = [f"# {self.title}", *self.intro]
        for sec in self.sections:
            parts.append(f"## {sec.title}")
            for block in sec.blocks:
                if isinstance(block, Table):
                    parts.append(block.markdown())
                elif isinstance(block, Figure):
                    parts.append(block.markdown(root))
                else:
                    parts.append(block)
        return "\n\n".join(parts) + "\n"

    def html(self) -> str:
        """One self-contained HTML page (CSS inline, PNGs base64-embedded)."""
        body = [f"<h1>{html.escape(self.title)}</h1>"]
        body += [f"<p>{inline_html(p)}</p>" for p in self.intro]
        for sec in self.sections:
            body.append(f"<h2>{html.escape(sec.title)}</h2>")
            for block in sec.blocks:
                if isinstance(block, Table | Figure):
                    body.append(block.html())
                else:
                    body.append(f"<p>{inline_html(block)}</p>")
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(self.title)}</title><style>{_CSS}</style></head>\n<body>\n"
            + "\n".join(body)
            + "\n</body></html>\n"
        )

    def write(self, out_dir: str | Path, stem: str = "report") -> tuple[Path, Path]:
        """Write `out_dir/<stem>.md` and `out_dir/<stem>.html`; returns both paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        md, page = out / f"{stem}.md", out / f"{stem}.html"
        text, markup = self.markdown(out), self.html()  # a missing figure fails before writing
        md.write_text(text)
        page.write_text(markup)
        return md, page
