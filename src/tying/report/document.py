"""A report as sections of paragraphs, tables and figures, rendered to Markdown and HTML.

Markdown links figures relatively (`![caption](figures/x.png)`); HTML embeds them as
base64 `data:image/png` URIs, so `report.html` is one self-contained file.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ccc; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; }
caption { caption-side: top; text-align: left; font-weight: 600; padding: 4px 0; }
figure { margin: 1.2em 0; } img { max-width: 100%; } figcaption { color: #555; font-size: .9em; }
.note { color: #555; font-size: .9em; }
"""


def format_value(value: Any, digits: int = 4) -> str:
    """A table cell: None/NaN as "–", floats with `digits` significant digits, ints as is."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–" if math.isnan(value) else str(value)
        return f"{value:.{digits}g}"
    return str(value)


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

    def html(self) -> str:
        out = ["<table>"]
        if self.title:
            out.append(f"<caption>{html.escape(self.title)}</caption>")
        out.append(
            "<tr>" + "".join(f"<th>{html.escape(c.header)}</th>" for c in self.columns) + "</tr>"
        )
        for row in self.cells():
            out.append("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>")
        out.append("</table>")
        if self.note:
            out.append(f'<p class="note">{html.escape(self.note)}</p>')
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
            raise FileNotFoundError(
                f"figure {path} does not exist: write the PNG before the report"
            )
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        caption = html.escape(self.caption)
        return (
            f'<figure><img alt="{caption}" src="data:image/png;base64,{data}">'
            f"<figcaption>{caption}</figcaption></figure>"
        )


Block = str | Table | Figure


@dataclass
class Section:
    """A titled list of blocks: paragraphs (str, Markdown-light: plain text), tables, figures."""

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
        body += [f"<p>{html.escape(p)}</p>" for p in self.intro]
        for sec in self.sections:
            body.append(f"<h2>{html.escape(sec.title)}</h2>")
            for block in sec.blocks:
                if isinstance(block, Table | Figure):
                    body.append(block.html())
                else:
                    body.append(f"<p>{html.escape(block)}</p>")
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
        md.write_text(self.markdown(out))
        page.write_text(self.html())
        return md, page
