"""The fenced blocks of a Markdown page and their `<!-- example: ... -->` markers: what
tests/docs/test_examples.py runs and benchmarks/quickstart.py times, read one way.

A block opens with a fence of three or more backticks and a language tag (```bash), optionally
indented (a block inside a list item; the indent is removed from its text), and closes at the
next line of backticks alone. The line directly above the fence may be a marker,
`<!-- example: skip — REASON -->`: a block that cannot run on this machine, and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from studies import ROOT

_FENCE = re.compile(r"^(\s*)(`{3,})(\S*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*example:\s*(.*?)\s*-->\s*$")
_SKIP = re.compile(r"skip\s*(?:—|–|--|-|:)?\s*(.*)$", re.S)


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: Path
    line: int  # of the opening fence, 1-based
    language: str  # lower case; "" for an untagged block
    text: str
    marker: str | None  # the text of `<!-- example: ... -->` directly above, if any

    @property
    def where(self) -> str:
        """`page:line`, the page relative to the repository when it is inside it."""
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        """The reason of a skip marker ("" when it gives none), None without one."""
        if self.marker is None:
            return None
        m = _SKIP.match(self.marker)
        return m.group(1).strip() if m else None


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, language = m.groups()
        j = i + 1
        while j < len(lines) and not (
            lines[j].strip().startswith(ticks) and lines[j].strip().strip("`") == ""
        ):
            j += 1
        body = "\n".join(line[len(indent) :] for line in lines[i + 1 : j])
        above = _MARKER.match(lines[i - 1]) if i > 0 else None
        blocks.append(Block(page, i + 1, language.lower(), body, above and above.group(1)))
        i = j + 1
    return blocks
