"""Every number in the prose of README.md and docs/*.md, and where it comes from.

tests/docs/test_numbers.py reads `docs/numbers.yaml` and fails on a number of the prose (outside
fenced and indented code, inline code and generated blocks) that is neither

* in a generated block (`<!-- generated: ... -->` ... `<!-- end generated -->`, or the claims
  table's markers),
* tied to a JSON key of the repository on its page (`pages.<page>.numbers`: the number as
  printed -> a value spec of `studies.claims`, checked against the JSON, or against a config's
  YAML),
* a default of the code (`pages.<page>.defaults`: the number as printed -> the dotted name of
  a dataclass field or a module constant, e.g. `tying.options.finetune.FinetuneOptions.rank`,
  or a list of such names; the test checks each one's value against the printed number),
* on the page's reviewed allow-list (`pages.<page>.allow`: a version, a constant of the
  method, arithmetic on a definition, each with its reason), nor
* allowed by the short rules below (dates, versions, references to sections, tables, figures,
  rows, seeds and steps, list markers, names such as GPT-2, and the constants of the command
  line's interface: an exit status 0, 1, 2, 130 or 143 where the text says it is one).

A number is its text as printed ("47.7", "1,064,960", "−0.204"); the sign is dropped. An entry's
key is that text, optionally scoped to a heading (`"0.047 @ 13."`: the 0.047s under a heading
that starts with "13.", `covers`); a key without a scope covers the page, and the test fails on
one whose numbers stand in more than one `##` section (`spanning`): one entry would vouch for
unrelated numbers that print alike.

`python -m studies.numbers` lists every number the test would fail on and every spanning key
(exit 1 if there are any). `--tie PAGE ...` (or `--tie-all`) ties a page's uncovered numbers to
the JSON files it cites where a leaf prints as the number and its key says what the number is
(`studies.numbers_tie`) and reports the numbers that match no cited JSON; `--tie-defaults
PAGE ...` (or `--tie-defaults-all`) ties them to the code's defaults instead (`defaults:`),
where the words around every occurrence of the number name a field or constant of that value
(`studies.numbers_defaults`); `--spanning PAGE ...` lists the spanning keys with their
occurrences.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from studies import ROOT
from studies.code_source import code_default as code_default  # re-exported: the test uses it
from studies.number_text import NUMBER

#: Begin and end of a generated block (the claims table keeps its own markers).
GENERATED = re.compile(
    r"<!-- (?:generated:|claims table: generated).*?-->.*?<!-- end (?:generated|of claims table) -->",
    re.S,
)
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
#: A line that makes a following indented line part of it: a list item or an indented line.
_LIST_OR_INDENTED = re.compile(r"^(?:\s*(?:[-*+]|\d+[.)])\s|\s{2,}\S)")
_LINK_TARGET = re.compile(r"\]\([^)]*\)|<https?://[^>]*>|https?://\S+")
_COMMENT = re.compile(r"<!--.*?-->", re.S)

#: The allow-list: a number preceded by one of these (with any list of numbers between) is a
#: reference, an index or a name, not a measurement.
_REFERENCE_BEFORE = re.compile(
    r"(?:§|\bTables?|\bFigures?|\bFig\.|\bAppendix|\brows?|\bitems?|\bstops?|\bissues?|\bseeds?"
    r"|\bsteps?|\bblocks?|\blayers?|\bentries|\bparts?|\bEq\.|\bstage|\barXiv|\bcommit)"
    r"[\s(]*(?:[\d.,]+(?:\s*(?:[–,→/-]|and|to|or)\s*)?)*$"
)
#: A version: a dotted number right after the name of a package (a number without a dot there,
#: "Triton 116 ms", is a measurement).
_VERSION_BEFORE = re.compile(
    r"(?:\bPython|\btorch|\btransformers|\bTriton|\bpeft|\bCUDA|\blm-eval|\bversion)"
    r"[\s(]*(?:[\d.,]+(?:\s*(?:[–,→/-]|and|to|or)\s*)?)*$"
)
#: The exit statuses of the command line (docs/architecture.md, "Errors"): 0 success, 1 a failure
#: the library explains, 2 bad input, 130 / 143 interrupted by SIGINT / SIGTERM (128 + signal).
EXIT_STATUSES = frozenset({"0", "1", "2", "130", "143"})
#: The allow-list's pattern for them: one of EXIT_STATUSES right after "exit", "exits (with)",
#: "exit status", "exit code" or "exits with status" (with any list of statuses between, each
#: perhaps followed by its signal: "exits with 130 (SIGINT) or 143 (SIGTERM)").
_EXIT_BEFORE = re.compile(
    r"\bexit(?:s|ed)?(?:\s+with)?(?:\s+(?:status(?:es)?|codes?))?\s*"
    r"(?:(?:0|1|2|130|143)\s*(?:\(SIG[A-Z]+\))?\s*(?:[/,]|or|and)\s*)*$",
    re.I,
)
_DATE_TIME = re.compile(
    r"\b\d{4}-\d{2}-\d{2}(?:[ T]\d{1,2}:\d{2}(?::\d{2})?)?|\b\d{1,2}:\d{2}(?::\d{2})?\b"
)


@dataclass(frozen=True)
class Found:
    """One number of a page's prose: its text (no sign), the line, the text around it, its
    offset in the page (characters) and the headings it stands under, outermost first (without
    the `#`s: ("Results", "13. Teacher mode over seeds", "Timing"))."""

    text: str
    line: int
    context: str
    start: int = -1
    headings: tuple[str, ...] = ()

    @property
    def section(self) -> str:
        """The page's section the number is in: its heading of level 2 (`## ...`), or "" above
        the first one."""
        return self.headings[1] if len(self.headings) > 1 else ""


#: A key of docs/numbers.yaml: the number as printed, then optionally " @ " and a scope, the
#: start of the text of a heading the number must stand under ("0.047 @ 13." ties the 0.047 of
#: "## 13. Teacher mode ..." only).
SCOPE_SEPARATOR = " @ "
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")


def split_key(key: str) -> tuple[str, str | None]:
    """(the number as printed, the heading prefix it is scoped to or None) of a key."""
    text, sep, scope = key.partition(SCOPE_SEPARATOR)
    return text, (scope if sep else None)


def covers(key: str, found: Found) -> bool:
    """Whether the entry `key` is about the occurrence `found`: the same text, and, for a scoped
    key, a heading of its section or subsection that starts with the scope (the page's title
    scopes the text above the first `##` section only)."""
    text, scope = split_key(key)
    if text != found.text:
        return False
    if scope is None:
        return True
    return any(h.startswith(scope) for h in found.headings[1:]) or (
        found.section == "" and found.headings[:1] != () and found.headings[0].startswith(scope)
    )


def entry_key(markdown: str) -> Callable[[Found], str]:
    """The key a new entry for an occurrence gets on this page: its text, scoped to its section
    (`scope_of`) where the same text stands in more than one section, so that no new entry
    spans sections (`spanning`)."""
    sections: dict[str, set[str]] = {}
    for f in numbers(markdown):
        sections.setdefault(f.text, set()).add(f.section)
    return lambda f: (
        f"{f.text}{SCOPE_SEPARATOR}{scope_of(f)}" if len(sections[f.text]) > 1 else f.text
    )


def scope_of(found: Found) -> str:
    """The scope that names `found`'s `##` section (its heading; the page's title above the
    first section)."""
    return found.section or (found.headings[0] if found.headings else "")


def prose(markdown: str) -> str:
    """The page with fenced and indented code, inline code, comments, link targets and
    generated blocks blanked (replaced by spaces of the same length, so line numbers stay)."""

    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    markdown = _blank_indented_code(markdown)  # before inline code turns a line's start blank
    for pattern in (GENERATED, _FENCE, _COMMENT, _INLINE_CODE, _LINK_TARGET, _DATE_TIME):
        markdown = pattern.sub(blank, markdown)
    return markdown


def _blank_indented_code(markdown: str) -> str:
    """Blank Markdown's indented code blocks: runs of lines indented by 4 or more spaces that
    follow a blank line after a paragraph that is neither a list item nor indented (an
    indented line after a list item continues the item)."""
    lines = markdown.split("\n")
    out = list(lines)
    context = ""  # the last non-blank line outside a code block
    i = 0
    while i < len(lines):
        line = lines[i]
        starts = i > 0 and not lines[i - 1].strip() and line.startswith("    ") and line.strip()
        if starts and not _LIST_OR_INDENTED.match(context):
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                out[i] = " " * len(lines[i])
                i += 1
            continue
        if line.strip():
            context = line
        i += 1
    return "\n".join(out)


def numbers(markdown: str) -> list[Found]:
    """The numbers of a page's prose that the allow-list does not cover."""
    text = prose(markdown)
    out = []
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    under = _headings_by_line(text, markdown)
    for m in NUMBER.finditer(text):
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
        if "." in number and _VERSION_BEFORE.search(before):
            continue
        if number in EXIT_STATUSES and _EXIT_BEFORE.search(before):
            continue  # an exit status of the command line: a constant of the interface
        line_start = text.rfind("\n", 0, start) + 1
        marker_place = re.fullmatch(r"\s*(?:[-*]\s*)?", text[line_start:start])
        if marker_place and number.isdigit() and after[:2] in (". ", ") "):
            continue  # a list marker (a decimal at a line's start, "0.405)", is a number)
        if re.fullmatch(r"#+\s*", text[line_start:start]):
            continue  # a numbered heading
        if number in ("0", "1") and not after.startswith("."):
            continue  # zero and one as words
        lineno = next(i for i in range(len(line_starts) - 1, -1, -1) if line_starts[i] <= start)
        context = markdown[max(0, start - 30) : end + 10].replace("\n", " ")
        out.append(Found(number, lineno + 1, context, start, under[lineno]))
    return out


def _headings_by_line(text: str, markdown: str) -> list[tuple[str, ...]]:
    """For each line of a page, the headings it stands under, outermost first, one per level (a
    level 1 title, a `##` section, its `###` ...); an absent level is "" so that index 1 is
    always the `##` section. A heading is a line of the prose `text` (code blanked, so a `#` in
    a code block is none); its name is the page's own line (`markdown`), inline code included
    (`` ## `tying demo` `` is named "`tying demo`")."""
    chain: list[str] = []
    out = []
    for line, raw in zip(text.split("\n"), markdown.split("\n"), strict=True):
        m = _HEADING.match(line)
        if m:
            level = len(m.group(1))
            chain = [*(chain + [""] * level)[: level - 1], raw.lstrip("#").strip()]
        out.append(tuple(chain))
    return out


def pages(root: Path) -> list[Path]:
    """README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def untied(root: Path, page: str, entry: dict) -> list[Found]:
    """The numbers of `page` that are neither tied, nor a checked default, nor allowed by its
    `entry` of the YAML."""
    return untied_in((root / page).read_text(), entry)


def untied_in(markdown: str, entry: dict) -> list[Found]:
    """The numbers of a page's text that no key of its `entry` covers (`covers`)."""
    keys = [k for kind in KINDS for k in entry.get(kind) or {}]
    return [f for f in numbers(markdown) if not any(covers(k, f) for k in keys)]


#: The kinds of entries of a page in docs/numbers.yaml.
KINDS = ("numbers", "defaults", "allow")


def spanning(markdown: str, entry: dict) -> dict[str, list[str]]:
    """The entries of a page that are not scoped and yet cover numbers in more than one of its
    `##` sections, with those sections: one entry would tie unrelated numbers (a 0.047 of one
    table and a 0.047 of another) to one source, so each must say where it applies
    (`"0.047 @ 13."`), one scoped entry per section."""
    found = numbers(markdown)
    out = {}
    for key in (k for kind in KINDS for k in entry.get(kind) or {}):
        if split_key(key)[1] is not None:
            continue
        sections = sorted({f.section for f in found if covers(key, f)})
        if len(sections) > 1:
            out[key] = sections
    return out


def tie(
    root: Path, page_names: list[str], source: Path | None = None, write: bool = True
) -> list[Any]:
    """Propose the ties of the untied numbers of `page_names` (`studies.numbers_tie`) and, with
    `write`, write them into docs/numbers.yaml (`source`); each written entry is checked
    against its JSON. Returns the pages' `PageResult`s."""
    import yaml

    from studies import claims as C
    from studies import numbers_tie as T

    path = source or root / "docs" / "numbers.yaml"
    results = []
    for page in page_names:
        entry = yaml.safe_load(path.read_text())["pages"].get(page) or {}
        markdown = (root / page).read_text()
        result = T.propose(
            root, page, markdown, prose(markdown), untied_in(markdown, entry), entry_key(markdown)
        )
        results.append(result)
        if not write or not result.ties:
            continue
        names = T.aliases(path.read_text())
        lines = [
            T.entry_line(label, T.value_spec(m, T.printed(split_key(label)[0], "")), names)
            for label, m in result.ties.items()
        ]
        T.write_ties(path, page, lines)
        check = (yaml.safe_load(path.read_text())["pages"][page] or {}).get("numbers") or {}
        for label in result.ties:
            got = C.Value.from_spec(label, check[label])
            assert math.isclose(got.rounded(C.measured(got, root)), got.value, abs_tol=1e-12)
    return results


def tie_defaults(
    root: Path, page_names: list[str], source: Path | None = None, write: bool = True
) -> list[Any]:
    """Propose ties of the untied numbers of `page_names` to the defaults of the code
    (`studies.numbers_defaults`) and, with `write`, write them into the pages' `defaults` in
    docs/numbers.yaml (`source`); each written name is read back
    with `code_default` and checked against the printed number. Returns the pages'
    `DefaultsResult`s."""
    import yaml

    from studies import numbers_defaults as D

    path = source or root / "docs" / "numbers.yaml"
    defaults = D.collect()
    results = []
    for page in page_names:
        entry = yaml.safe_load(path.read_text())["pages"].get(page) or {}
        markdown = (root / page).read_text()
        result = D.propose(page, markdown, untied_in(markdown, entry), defaults)
        results.append(result)
        if not write or not result.ties:
            continue
        lines = [D.entry_line(label, names) for label, names in result.ties.items()]
        D.write_defaults(path, page, lines)
        check = (yaml.safe_load(path.read_text())["pages"][page] or {}).get("defaults") or {}
        for label, names in result.ties.items():
            written = check[label]
            assert (written if isinstance(written, list) else [written]) == names, label
            for name in names:
                assert math.isclose(code_default(name), float(label.replace(",", ""))), name
    return results


def main(argv: list[str] | None = None) -> int:
    """`python -m studies.numbers`: list every number of every page that no entry of
    docs/numbers.yaml covers, and every spanning key (exit 1 if there are any). With `--tie
    PAGE ...` or `--tie-all`: propose ties of the pages' untied numbers to the JSON files they
    cite, write them (`studies.numbers_tie`) and print a report; `--tie-defaults` likewise to
    the code's defaults; `--spanning PAGE ...`: the spanning keys of those pages only."""
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m studies.numbers", description=__doc__)
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--tie", nargs="+", metavar="PAGE", help="tie the untied numbers of PAGEs")
    ap.add_argument("--tie-all", action="store_true", help="tie the untied numbers of every page")
    ap.add_argument(
        "--dry-run", action="store_true", help="with --tie(-defaults): report, write nothing"
    )
    ap.add_argument(
        "--unmatched", type=Path, metavar="FILE", help="with --tie: write the unmatched as JSON"
    )
    ap.add_argument(
        "--tie-defaults",
        nargs="+",
        metavar="PAGE",
        help="tie the untied numbers of PAGEs to the code's defaults (studies.numbers_defaults)",
    )
    ap.add_argument("--tie-defaults-all", action="store_true", help="--tie-defaults on every page")
    ap.add_argument(
        "--spanning",
        nargs="*",
        metavar="PAGE",
        help="list the unscoped keys of PAGEs (default: all) whose numbers lie in several "
        "sections, with each occurrence's line, section and context; exit 1 if there are any",
    )
    args = ap.parse_args(argv)
    if args.spanning is not None:
        return _print_spanning(
            args.root, _chosen(ap, args.root, args.spanning, not args.spanning, "--spanning")
        )
    if args.tie_defaults or args.tie_defaults_all:
        from studies import numbers_defaults

        chosen = _chosen(
            ap, args.root, args.tie_defaults or [], args.tie_defaults_all, "--tie-defaults"
        )
        found = tie_defaults(args.root, chosen, write=not args.dry_run)
        print(numbers_defaults.report(found))
        return 0
    if args.tie or args.tie_all:
        from studies import numbers_tie

        chosen = _chosen(ap, args.root, args.tie or [], args.tie_all)
        results = tie(args.root, chosen, write=not args.dry_run)
        print(numbers_tie.report(results))
        if args.unmatched:
            unmatched = {r.page: r.unmatched for r in results if r.unmatched}
            args.unmatched.write_text(json.dumps(unmatched, indent=1, ensure_ascii=False) + "\n")
        return 0
    every = _chosen(ap, args.root, [], True)
    return max(_print_untied(args.root, every), _print_spanning(args.root, every))


def _print_untied(root: Path, chosen: list[str]) -> int:
    """Print each page's numbers that no entry covers (`untied`), one a line; 1 if any."""
    import yaml

    spec = yaml.safe_load((root / "docs" / "numbers.yaml").read_text())["pages"]
    total = 0
    for page in chosen:
        for f in untied(root, page, spec.get(page) or {}):
            total += 1
            print(f"{page}:{f.line}: {f.text!r} [{f.section[:30]}] …{f.context}…")
    print(f"{total} numbers without a source")
    return 1 if total else 0


def _print_spanning(root: Path, chosen: list[str]) -> int:
    """Print each page's spanning keys (`spanning`) with their occurrences; 1 if any."""
    import yaml

    spec = yaml.safe_load((root / "docs" / "numbers.yaml").read_text())["pages"]
    total = 0
    for page in chosen:
        markdown = (root / page).read_text()
        keys = spanning(markdown, spec.get(page) or {})
        total += len(keys)
        found = numbers(markdown) if keys else []
        for key, sections in keys.items():
            print(f"{page}: {key!r} is in {len(sections)} sections")
            for f in found:
                if covers(key, f):
                    print(f"    {f.line}: [{f.section[:30]}] …{f.context}…")
    print(f"{total} keys span sections")
    return 1 if total else 0


def _chosen(ap: Any, root: Path, names: list[str], every: bool, flag: str = "--tie") -> list[str]:
    """The pages named after `flag` on the command line (README.md or docs/*.md), or all."""
    known = [str(p.relative_to(root)) for p in pages(root)]
    chosen = known if every else []
    for name in names:
        page = next((k for k in known if name in (k, f"docs/{name}")), None)
        if page is None:
            ap.error(f"{flag}: no page {name!r} (README.md or docs/*.md)")
        chosen.append(page)
    return chosen


if __name__ == "__main__":
    raise SystemExit(main())
