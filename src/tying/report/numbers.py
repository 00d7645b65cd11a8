"""Every number in the prose of README.md and docs/*.md, and where it comes from.

tests/docs/test_numbers.py reads `docs/numbers.yaml` and fails on a number of the prose (outside
fenced code, inline code and generated blocks) that is neither

* in a generated block (`<!-- generated: ... -->` ... `<!-- end generated -->`, or the claims
  table's markers),
* tied to a JSON key of the repository on its page (`pages.<page>.numbers`: the number as
  printed -> a value spec of `tying.report.claims`, checked against the JSON),
* allowed by the short rules below (dates, versions, references to sections, tables, figures,
  rows, seeds and steps, list markers, names such as GPT-2), nor
* counted in the page's `untied` budget: a ratchet for the pages not yet tied, which must equal
  the page's count of untied numbers (a new untied number fails the test, and so does tying one
  without lowering the count).

A number is its text as printed ("47.7", "1,064,960", "−0.204"); the sign is dropped, so one
entry ties "0.204" wherever it appears on that page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: Begin and end of a generated block (the claims table keeps its own markers).
GENERATED = re.compile(
    r"<!-- (?:generated:|claims table: generated).*?-->.*?<!-- end (?:generated|of claims table) -->",
    re.S,
)
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK_TARGET = re.compile(r"\]\([^)]*\)|<https?://[^>]*>|https?://\S+")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
#: A number: digits with thousands separators and decimals, an exponent.
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?(?:[eE][−-]?\d+)?")

#: The allow-list: a number preceded by one of these (with any list of numbers between) is a
#: reference, an index or a name, not a measurement.
_REFERENCE_BEFORE = re.compile(
    r"(?:§|\bTables?|\bFigures?|\bFig\.|\bAppendix|\brows?|\bitems?|\bstops?|\bissues?|\bseeds?"
    r"|\bsteps?|\bblocks?|\blayers?|\bentries|\bparts?|\bEq\.|\bstage|\bPython|\btorch"
    r"|\btransformers|\bTriton|\bpeft|\bCUDA|\blm-eval|\bversion|\barXiv|\bcommit)"
    r"[\s(]*(?:[\d.,]+(?:\s*(?:[–,→/-]|and|to|or)\s*)?)*$"
)
_DATE_TIME = re.compile(
    r"\b\d{4}-\d{2}-\d{2}(?:[ T]\d{1,2}:\d{2}(?::\d{2})?)?|\b\d{1,2}:\d{2}(?::\d{2})?\b"
)


@dataclass(frozen=True)
class Found:
    """One number of a page's prose: its text (no sign), the line, the text around it."""

    text: str
    line: int
    context: str


def prose(markdown: str) -> str:
    """The page with fenced code, inline code, comments, link targets and generated blocks
    blanked (replaced by spaces of the same length, so line numbers stay)."""

    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    for pattern in (GENERATED, _FENCE, _COMMENT, _INLINE_CODE, _LINK_TARGET, _DATE_TIME):
        markdown = pattern.sub(blank, markdown)
    return markdown


def numbers(markdown: str) -> list[Found]:
    """The numbers of a page's prose that the allow-list does not cover."""
    text = prose(markdown)
    out = []
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    for m in _NUMBER.finditer(text):
        start, end = m.span()
        before, after = text[max(0, start - 40) : start], text[end : end + 12]
        number = m.group(0).rstrip(",")
        if before and (before[-1].isalnum() or before[-1] in "._/#"):
            continue  # part of a name or an identifier: GPT2, x5, v1.2, 2602.04556
        if len(before) >= 2 and before[-1] == "-" and before[-2].isalpha():
            continue  # GPT-2, OLMo-1B-0724
        if after[:1] == "k" and not after[1:2].isalpha():
            number += "k"  # 362k tokens/s: a number in thousands
        elif after[:1].isalpha() or (after[:1] != "" and after[:1] in "³²"):
            continue  # 135M, 1B, 8192³, 4x
        if after[:1] == "." and after[1:2].isdigit():
            continue  # the head of a version (3.12.3)
        if _REFERENCE_BEFORE.search(before):
            continue
        line_start = text.rfind("\n", 0, start) + 1
        if re.fullmatch(r"\s*(?:[-*]\s*)?", text[line_start:start]) and after[:2] in (". ", ") "):
            continue  # a list marker
        if re.fullmatch(r"#+\s*", text[line_start:start]):
            continue  # a numbered heading
        if number in ("0", "1") and not after.startswith("."):
            continue  # zero and one as words
        lineno = next(i for i in range(len(line_starts) - 1, -1, -1) if line_starts[i] <= start)
        context = markdown[max(0, start - 30) : end + 10].replace("\n", " ")
        out.append(Found(number, lineno + 1, context))
    return out


def pages(root: Path) -> list[Path]:
    """README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]
