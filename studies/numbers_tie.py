"""A mechanical tie proposer for the untied numbers of a page (docs/numbers.yaml).

    python -m studies.numbers --tie docs/results.md [PAGE ...]   # or --tie-all; --dry-run

For each number of a page that is neither tied, a default, nor allowed (`studies.numbers`; this module
reads no page itself: `studies.numbers.tie` hands it a page's untied numbers):

1. the candidate JSON files are the repository JSON files the page cites (a `something.json`
   path that exists from the repository's root or from the page's folder; a bare file name is
   looked for in docs/results/, benchmarks/results/ and docs/figures/), ranked for that number
   by the citation nearest to its first occurrence: cited in the same section first, then by
   the distance in lines;
2. each file is flattened into (path, number) leaves, keys and list indices joined by "/" (the
   path syntax of `studies.claims.lookup`, which reads `a/3/b` as item 3 of list `a`); the
   items of an axis (≥ 3 increasing integers: steps) or a series (more than `MAX_LIST`
   numbers: a loss per step, a score per item) are left out, since a value equal to the
   page's there is more likely chance than the number meant;
3. a leaf matches when it prints as the page prints the number: as many decimals as the page
   (`digits`), or as many significant digits for scientific notation (`sig`); with the scale
   the unit after the number asks for (100 for "%", 1000 for "ms", 1/60 for "min", 1/3600 for
   "h", 0.001 for a "k" number) or none (for a time unit only from a key that names it);
4. only a number that carries information is tied: one with a decimal point ("0.52", "7.9")
   or at least 3 significant digits ("1,064,960", "362k"); not zero, not one significant
   digit ("0.1", "2e-4": settings), not a round value below 10 ("1.000"); a small integer
   ("8", "12") is left for review (a match by value would say nothing);
5. the words of the number's sentence (in a table: its row's first cell, its cell and its
   column's header; elsewhere its sentence) decide between the matches:
   - a key that names only texts (tasks, interfaces, teachers) the sentence does not, where
     the sentence names another of the same group (`CONTRASTS`), is not a match; the names
     of the records above a leaf (`LABEL_KEYS`: run 1 is "scratch-tt-s0") count as its key's;
   - a file cited in another section is a candidate only when the number's section cites no
     JSON file, the file is cited before the number, and its key shares a word with the
     sentence that is not `WEAK` (a statistic, a run name or a `CONTRASTS` name);
   - among the matches, in this order: a file cited in the number's section; the key that
     shares the most words with the sentence; the file cited nearest; the leaf whose sign is
     the printed one; the unit's scale before none; the file cited first; the leaf first in
     the file;
   - a number with fewer than 3 significant digits ("0.52") is tied only when its key shares
     a word with the sentence that is not `WEAK` (`MIN_OVERLAP_SHORT`);
   - when keys of different quantities with different values match equally well (the
     seed-3 train-loss gap and the seed-7 validation gap both print as 0.185), the number is
     left for review;
6. the ties are written into the page's `numbers` in docs/numbers.yaml (the file's entries,
   comments and anchors are kept; a file with an anchor is written as its alias), each under
   the key `studies.numbers.entry_key` gives it (scoped to its section where the same text
   stands in several).

Numbers that carry information but match no leaf of any cited file are reported as
"unmatched": candidates for a number that disagrees with its source, or whose source the page
does not cite (issue 35, item 11). `--unmatched FILE` writes them as JSON.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from studies import claims as C

#: A JSON file name as a page cites it (in prose, code or a link target).
_JSON_PATH = re.compile(r"[A-Za-z0-9_.+/-]*[A-Za-z0-9_+-]\.json\b")
#: Folders a bare file name ("report.json") is looked for in.
BARE_DIRS = ("docs/results", "benchmarks/results", "docs/figures")
#: The unit after a number (in the page's prose) -> the scale from the JSON value to the
#: printed one. The plain value (scale 1) is tried after it.
#: A time unit's plain value (scale 1) is taken only from a key that names the unit.
_UNITS: tuple[tuple[re.Pattern[str], float, frozenset[str]], ...] = (
    (re.compile(r"\s?(?:%|percent\b|per cent\b)"), 100.0, frozenset()),
    (re.compile(r"\s?ms\b"), 1000.0, frozenset({"ms", "millisecond"})),
    (re.compile(r"\s?(?:µs|μs|us)\b"), 1e6, frozenset({"us", "microsecond"})),
    (re.compile(r"\s?(?:min|minutes?)\b"), 1 / 60, frozenset({"min", "minute"})),
    (re.compile(r"\s?(?:h|hours?)\b"), 1 / 3600, frozenset({"h", "hour"})),
)
#: A list of more numbers than this is a series (per step, per item): its items are not tied.
MAX_LIST = 8
#: The least words (not `WEAK`) a key must share with the sentence of a number of fewer than
#: 3 significant digits ("0.52", "7.9") to be tied to it.
MIN_OVERLAP_SHORT = 1
#: Words that say nothing about which quantity a number is (in a sentence or a key).
_STOPWORDS = """the a an and or of to in on at by for from with as is are was were be been it its
this that these those than then not no per over under each every all one two three both which
what when where who how here there same other into onto about after before between also only
more most less least much many very we our ours us you your they their them he she his her s vs
e.g i.e see table tables row rows column columns value values number numbers json file md docs
results benchmarks page section run runs unit units"""
_STOP = frozenset(_STOPWORDS.split())
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")
#: Names that exclude each other (a text, a task, an interface, a teacher): a key (its path or
#: the names of the records above it) that names only ones the sentence does not, where the
#: sentence names another of the group, is another quantity (the KL on Gutenberg for a number
#: the table heads "KL WikiText-2"; run 1, scratch-tt-s0, for a row of scratch-pit-s0).
CONTRASTS: tuple[frozenset[str], ...] = (
    frozenset({"wikitext", "gutenberg"}),
    frozenset({"mbpp", "gsm8k", "svamp", "humaneval"}),
    frozenset({"untied", "tt", "pit"}),
    frozenset({"decoder", "gpt2", "smollm2"}),
)
_ALIASES = {"gpt": "gpt2", "smollm": "smollm2"}
#: Words that do not say which quantity a key holds: the names of `CONTRASTS`, statistics and
#: run names. A key of a file cited in another section must share another word with the
#: sentence ("spearman", "ppl", "effective").
WEAK = frozenset().union(
    *CONTRASTS,
    {"mean", "median", "min", "max", "total", "step", "scratch", "seed", "our", "ours"},
    {f"s{i}" for i in range(10)},
)
_SENTENCE_END = re.compile(r"[.;!?](?=\s)")


@dataclass(frozen=True)
class Printed:
    """How a page prints a number: its value (no sign), decimals or significant digits, and
    the scales from a JSON value to it, in the order they are tried."""

    text: str
    value: float
    digits: int | None
    sig: int | None
    scales: tuple[float, ...]
    #: a plain (scale 1) match needs a key with one of these words (a time unit's name)
    plain_words: frozenset[str] = frozenset()

    def prints(self, x: float, scale: float) -> float:
        """`x` (a JSON leaf) rounded the way the page prints the number (`studies.claims`'
        rounding), with its sign."""
        x = x * scale
        if self.sig is not None:
            return float(f"{x:.{self.sig}g}")
        return round(x, self.digits if self.digits is not None else 0)

    def matches(self, x: float, scale: float) -> bool:
        return math.isclose(abs(self.prints(x, scale)), self.value, rel_tol=1e-9, abs_tol=1e-12)


def significant_digits(text: str) -> int:
    """Significant digits of a printed number: "0.052" 2, "1,064,960" 7, "300" 1 (trailing
    zeros of an integer are not counted), "2.50" 3, "9.6e-4" 2, "362k" 3."""
    mantissa = re.split(r"[eE]", text.replace(",", "").rstrip("k"))[0]
    digits = mantissa.replace(".", "").lstrip("0")
    if "." not in mantissa:
        digits = digits.rstrip("0")
    return len(digits)


def informative(text: str) -> bool:
    """A number a match by value says something about: a decimal point or ≥ 3 significant
    digits, and not zero."""
    try:
        value = _value(text)
    except ValueError:
        return False
    mantissa = re.split(r"[eE]", text)[0]
    sig = significant_digits(text)
    if "." in mantissa and value == int(value) and value < 10:
        return False  # "1.000", "2.0": a round value that many leaves print as
    return value != 0 and sig >= 2 and ("." in mantissa or sig >= 3)


def _value(text: str) -> float:
    """The printed number's value as the test reads it (tests/docs/test_numbers.py)."""
    return float(text.rstrip("k%×").replace(",", ""))


def printed(text: str, after: str) -> Printed:
    """The number `text` as printed, `after` the prose that follows it (for its unit)."""
    plain = text.rstrip("k").replace(",", "")
    if re.search(r"[eE]", plain):
        mantissa = re.split(r"[eE]", plain)[0]
        sig, digits = len(mantissa.replace(".", "").lstrip("0")) or 1, None
    else:
        sig, digits = None, len(plain.split(".")[1]) if "." in plain else 0
    plain_words: frozenset[str] = frozenset()
    if text.endswith("k"):
        scales: tuple[float, ...] = (0.001,)
    else:
        unit = next(((s, w) for pattern, s, w in _UNITS if pattern.match(after)), None)
        if unit is not None:
            scales, plain_words = (unit[0], 1.0), unit[1]
        else:
            scales = (1.0,)
    return Printed(text, _value(text), digits, sig, scales, plain_words)


#: The string fields that name an item of a list of records (a run, a base, an adapter); a
#: leaf below the item is known by these names too.
LABEL_KEYS = ("name", "label", "run", "base", "task", "tie", "model", "teacher", "interface")


def leaves(data: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """(path, number) of every numeric leaf of a JSON document, in file order; keys and list
    indices joined by "/" (`studies.claims.lookup`'s syntax). Booleans are not numbers."""
    for path, x, _ in labelled_leaves(data, prefix):
        yield path, x


def labelled_leaves(
    data: Any, prefix: str = "", labels: str = ""
) -> Iterator[tuple[str, float, str]]:
    """`leaves` with the names (`LABEL_KEYS`) of the list items above each leaf, joined by
    spaces: ("runs/2/val_loss", 5.946, "scratch-pit-s0 pit")."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from labelled_leaves(v, f"{prefix}{k}/", labels)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            names = labels
            if isinstance(v, dict):
                found = [v[k] for k in LABEL_KEYS if isinstance(v.get(k), str) and len(v[k]) < 80]
                names = " ".join([labels, *found]).strip()
            yield from labelled_leaves(v, f"{prefix}{i}/", names)
    elif isinstance(data, (int, float)) and not isinstance(data, bool) and math.isfinite(data):
        yield prefix[:-1], float(data), labels


def words(text: str) -> set[str]:
    """The content words of a sentence or a key path, lower case, a plural's "s" dropped."""
    out = set()
    for w in _WORD.findall(text.replace("_", " ")):
        w = w.lower()
        if w in _STOP or len(w) < 2 or w.isdigit():
            continue
        w = _ALIASES.get(w, w)
        out.add(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w)
    return out


def quantity(path: str) -> str:
    """The name of the quantity a key holds: its path without list indices
    ("teachers/decoder/units/3/diff_val" -> "teachers/decoder/units/diff_val")."""
    return re.sub(r"/\d+(?=/|$)", "", path)


def contradicts(sentence_words: set[str], key_words: set[str]) -> bool:
    """Whether a key names only data sets (interfaces, teachers) that the sentence does not,
    while the sentence names another one of the same group (`CONTRASTS`)."""
    for group in CONTRASTS:
        said, named = sentence_words & group, key_words & group
        if said and named and not said & named:
            return True
    return False


@dataclass(frozen=True)
class Cited:
    """A JSON file a page cites, and the lines it is cited on."""

    file: str
    lines: tuple[int, ...]
    order: int


def cited_files(root: Path, page: str, markdown: str) -> list[Cited]:
    """The repository's JSON files that `page` cites (see the module's docstring), in the
    order of their first citation."""
    found: dict[str, list[int]] = {}
    base = (root / page).parent
    for lineno, line in enumerate(markdown.split("\n"), 1):
        for m in _JSON_PATH.finditer(line):
            name = m.group(0).lstrip("./") if m.group(0).startswith("./") else m.group(0)
            file = _resolve(root, base, name)
            if file is not None:
                found.setdefault(file, []).append(lineno)
    return [Cited(f, tuple(ls), i) for i, (f, ls) in enumerate(found.items())]


def _resolve(root: Path, base: Path, name: str) -> str | None:
    candidates = [root / name, base / name]
    if "/" not in name:
        candidates += [root / d / name for d in BARE_DIRS]
    for c in candidates:
        if c.is_file():
            try:
                rel = c.resolve().relative_to(root.resolve())
            except ValueError:
                continue
            return str(rel)
    return None


def sections(prose_text: str) -> list[int]:
    """The line numbers (1-based) of the page's headings, outside code."""
    return [i for i, line in enumerate(prose_text.split("\n"), 1) if re.match(r"#{1,6}\s", line)]


def _section(heads: list[int], line: int) -> int:
    return sum(1 for h in heads if h <= line)


def sentence(markdown: str, start: int) -> str:
    """The words that say what the number at offset `start` of the page is: in a table, the
    header of its column, the row's first cell and its own cell; elsewhere the sentence of its
    paragraph it stands in (split at ".", ";", "?" or "!" before a space)."""
    line_start = markdown.rfind("\n", 0, start) + 1
    line_end = markdown.find("\n", start)
    line_end = len(markdown) if line_end < 0 else line_end
    row = markdown[line_start:line_end]
    if row.lstrip().startswith("|"):
        lines = markdown[:line_start].split("\n")[:-1]
        head = len(lines)
        while head > 0 and lines[head - 1].lstrip().startswith("|"):
            head -= 1
        header = _cells(lines[head]) if head < len(lines) else []
        cells = _cells(row)
        column = row[: start - line_start].count("|") - 1
        out = [cells[0] if cells else "", cells[column] if 0 <= column < len(cells) else ""]
        if 0 <= column < len(header):
            out.append(header[column])
        return " ".join(out)
    para_start = markdown.rfind("\n\n", 0, start)
    para_start = 0 if para_start < 0 else para_start + 2
    para_end = markdown.find("\n\n", start)
    para_end = len(markdown) if para_end < 0 else para_end
    cuts = [para_start] + [
        para_start + m.end() for m in _SENTENCE_END.finditer(markdown[para_start:para_end])
    ]
    begin = max(c for c in cuts if c <= start)
    end = min([c for c in cuts if c > start] + [para_end])
    return markdown[begin:end]


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


@dataclass
class Match:
    """A leaf that prints as the number: its file, path, scale and value."""

    file: str
    path: str
    scale: float
    leaf: float
    rank: tuple = field(default=(), compare=False)
    #: the words its key shares with the sentence, `WEAK` ones not counted
    specific: int = 0


@dataclass
class PageResult:
    """What the proposer found for one page."""

    page: str
    ties: dict[str, Match]
    untied_before: int
    untied_after: int
    unmatched: list[dict[str, Any]]
    #: matched, but by a key that shares no word with the sentence (not tied)
    no_word: list[str]
    #: matched only in a file cited outside the number's section, which cites its own (not tied)
    far: list[str]
    #: matched equally well by keys of different quantities (not tied)
    ambiguous: list[str]


class Number(Protocol):
    """A number of a page's prose (`studies.numbers.Found`): its text, line and offset."""

    text: str
    line: int
    context: str
    start: int


def propose(
    root: Path,
    page: str,
    markdown: str,
    text: str,
    untied: list[Number],
    key: Callable[[Number], str] = lambda f: f.text,
) -> PageResult:
    """The ties for the `untied` numbers of `page` (`markdown`, and `text`, its prose with
    code and generated blocks blanked: `studies.numbers.prose`); nothing is written.
    `studies.numbers.tie` writes them. `key` gives the entry an occurrence belongs to (its
    text, or its text scoped to its section, "0.047 @ 13. ..."): each entry is matched from its
    first occurrence and ties all of its occurrences."""
    heads = sections(text)
    cited = cited_files(root, page, markdown)
    first: dict[str, Number] = {}
    for f in untied:
        first.setdefault(key(f), f)
    ties: dict[str, Match] = {}
    unmatched: list[dict[str, Any]] = []
    no_word: list[str] = []
    far: list[str] = []
    ambiguous: list[str] = []
    for entry, f in first.items():
        label = f.text
        if not informative(label):
            continue
        try:
            spec = printed(label, text[f.start + len(label) - label.endswith("k") :][:12])
        except ValueError:
            continue
        negative = f.start > 0 and text[f.start - 1] in "−-"
        context = words(sentence(markdown, f.start))
        section = _section(heads, f.line)
        candidates: list[Match] = []
        matched = False  # a leaf prints as the number (some rule below may still refuse it)
        local = [c for c in cited if any(_section(heads, ln) == section for ln in c.lines)]
        for c in cited:
            same = c in local
            if not same and min(c.lines) > f.line:
                continue  # another section's file counts only as a source stated before
            distance = min(abs(ln - f.line) for ln in c.lines)
            for s_i, scale in enumerate(spec.scales):
                for order, path, x, key_words, label_words in _index(root, c.file, spec, scale).get(
                    spec.value, ()
                ):
                    if scale == 1.0 and spec.plain_words and not spec.plain_words & key_words:
                        continue
                    matched = True
                    if contradicts(context, key_words | label_words):
                        continue
                    specific = len((context & key_words) - WEAK)
                    if not same and not specific:
                        continue  # another section's file: its key must say what the number is
                    overlap = len(context & key_words)
                    sign = (x < 0) != negative
                    rank = (not same, -overlap, distance, sign, s_i, c.order, order)
                    candidates.append(Match(c.file, path, scale, x, rank, specific))
        if not matched:
            unmatched.append(
                {
                    "number": label,
                    "line": f.line,
                    "context": f.context.strip(),
                    "significant_digits": significant_digits(label),
                    "cited": [c.file for c in cited],
                }
            )
            continue
        if not candidates:
            no_word.append(entry)
            continue
        best = min(candidates, key=lambda m: m.rank)
        if best.rank[0] and local:
            far.append(entry)  # the section cites its own files: another file's match is chance
            continue
        if significant_digits(label) < 3 and best.specific < MIN_OVERLAP_SHORT:
            no_word.append(entry)
            continue
        level = [m for m in candidates if m.rank[:5] == best.rank[:5]]
        if len({quantity(m.path) for m in level}) > 1 and len({m.leaf for m in level}) > 1:
            ambiguous.append(entry)  # equally good keys of different quantities and values
            continue
        ties[entry] = best
    after = sum(1 for f in untied if key(f) not in ties)
    return PageResult(page, ties, len(untied), after, unmatched, no_word, far, ambiguous)


#: A leaf of a JSON file: its order in the file, its path, its value, the words of its path
#: and the words of the names of the list items above it.
Leaf = tuple[int, str, float, frozenset[str], frozenset[str]]
_INDEX: dict[tuple, dict[float, list[Leaf]]] = {}


def _index(root: Path, file: str, p: Printed, scale: float) -> dict[float, list[Leaf]]:
    """The leaves of `file` by the value (no sign) they print as with `p`'s decimals or
    significant digits at `scale`: {printed value: [leaf]}."""
    key = (str(root), file, p.digits, p.sig, scale)
    if key not in _INDEX:
        index: dict[float, list[Leaf]] = {}
        for leaf in _flatten(root, file):
            index.setdefault(abs(p.prints(leaf[2], scale)), []).append(leaf)
        _INDEX[key] = index
    return _INDEX[key]


@functools.cache
def _flatten(root: Path, file: str) -> list[Leaf]:
    """The leaves of `file` that may be tied: not in an axis or a series (`_axes`), and whose
    path `studies.claims.lookup` reads back to the same leaf (a key holding "/" could make a
    path ambiguous; such a leaf is dropped)."""
    try:
        data = C.load_json(file, root)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return []
    axes: set[str] = set()
    _axes(data, "", axes)
    out = []
    for order, (path, x, labels) in enumerate(labelled_leaves(data)):
        if path.rsplit("/", 1)[0] in axes:
            continue
        try:
            if float(C.lookup(data, path)) == x:
                out.append((order, path, x, frozenset(words(path)), frozenset(words(labels))))
        except (KeyError, IndexError, ValueError, TypeError):
            continue
    return out


def _axes(data: Any, prefix: str, out: set[str]) -> None:
    """The paths of the lists of `data` whose items are not tied by value: an axis (≥ 3
    strictly increasing integers: steps, positions, sizes), whose items are indices, and a
    series (more than MAX_LIST numbers: a loss per step, a score per item), where a value
    equal to the page's is more likely chance than the number the page means."""
    if isinstance(data, dict):
        for k, v in data.items():
            _axes(v, f"{prefix}{k}/", out)
    elif isinstance(data, list):
        nums = [x for x in data if isinstance(x, (int, float)) and not isinstance(x, bool)]
        ints = [x for x in nums if isinstance(x, int)]
        axis = len(data) >= 3 and len(ints) == len(data)
        if (axis and all(a < b for a, b in itertools.pairwise(ints))) or len(nums) > MAX_LIST:
            out.add(prefix[:-1])
        for i, v in enumerate(data):
            _axes(v, f"{prefix}{i}/", out)


def value_spec(m: Match, p: Printed) -> dict[str, Any]:
    """The entry of docs/numbers.yaml for a match (the value format of docs/results/claims.yaml)."""
    value = p.prints(m.leaf, m.scale)
    spec: dict[str, Any] = {"file": m.file, "path": m.path}
    if p.sig is not None:
        spec.update(value=value, sig=p.sig)
    else:
        spec.update(value=int(value) if p.digits == 0 else value, digits=p.digits)
    if m.scale != 1.0:
        spec["scale"] = m.scale
    return spec


def _yaml_scalar(x: Any) -> str:
    """`x` as a YAML flow scalar that PyYAML reads back as the same value."""
    if isinstance(x, bool):
        raise TypeError(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        r = repr(x)
        if "e" in r:
            mant, exp = r.split("e")
            if "." not in mant:
                mant += ".0"
            r = f"{mant}e{exp if exp[0] in '+-' else '+' + exp}"
        return r
    s = str(x)
    if re.fullmatch(r"[A-Za-z0-9_./+-][A-Za-z0-9_./+ -]*", s) and not s.endswith(" "):
        return s
    return json.dumps(s, ensure_ascii=False)


def entry_line(label: str, spec: dict[str, Any], aliases: dict[str, str]) -> str:
    """One line of a page's `numbers` mapping, in the file's style."""
    parts = []
    for k, v in spec.items():
        if k == "file" and v in aliases:
            parts.append(f"file: *{aliases[v]}")
        else:
            parts.append(f"{k}: {_yaml_scalar(v)}")
    return f"      {json.dumps(label, ensure_ascii=False)}: {{{', '.join(parts)}}}"


def write_ties(path: Path, page: str, lines: list[str]) -> None:
    """Append `lines` (entries of `numbers`) to `page`'s block of the YAML file at `path`; the
    rest of the file is kept as it is."""

    def insert(block: str) -> str:
        if not lines:
            return block
        block = re.sub(r"(?m)^    numbers: \{\}\n", "    numbers:\n", block)
        numbers = re.search(r"(?m)^    numbers:\n((?:      [^\n]*\n)*)", block)
        new = "".join(f"{x}\n" for x in lines)
        if numbers is None:
            return "    numbers:\n" + new + block
        return block[: numbers.end()] + new + block[numbers.end() :]

    update_page_block(path, page, insert)


def update_page_block(path: Path, page: str, insert: Callable[[str], str]) -> None:
    """Rewrite `page`'s block of the YAML file at `path` (created at the end if missing) by
    `insert` (block text -> block text); the rest of the file, the comment lines just above the
    next page included, is kept as it is."""
    text = path.read_text()
    head = re.search(rf"(?m)^  {re.escape(page)}:\n", text)
    if head is None:
        text = text.rstrip("\n") + f"\n  {page}:\n"
        head = re.search(rf"(?m)^  {re.escape(page)}:\n", text)
        assert head is not None
    nxt = re.search(r"(?m)^(?:  \S|\S)", text[head.end() :])
    stop = head.end() + (nxt.start() if nxt else len(text) - head.end())
    block = text[head.end() : stop]
    # a comment line just above the next page belongs to the next page
    trail = re.search(r"(?:^  #[^\n]*\n)+\Z", block, re.M)
    tail = trail.group(0) if trail else ""
    block = insert(block[: len(block) - len(tail)])
    path.write_text(text[: head.end()] + block + tail + text[stop:])


def aliases(text: str) -> dict[str, str]:
    """The file anchors at the head of docs/numbers.yaml ("G: &G benchmarks/results/gpu.json")."""
    return {m.group(2): m.group(1) for m in re.finditer(r"(?m)^\w+: &(\w+) (\S+)$", text)}


def report(results: list[PageResult]) -> str:
    """The proposer's report: per page, tied and left; the unmatched numbers."""
    out = []
    for r in results:
        strong = sum(1 for u in r.unmatched if u["significant_digits"] >= 3)
        out.append(
            f"{r.page}: tied {len(r.ties)}, untied {r.untied_before} -> {r.untied_after}; "
            f"unmatched {len(r.unmatched)} ({strong} with ≥3 significant digits); matched but "
            f"not tied: {len(r.no_word)} (no key says what the number is), {len(r.far)} (only "
            f"in a file of another section), {len(r.ambiguous)} (keys of different quantities)"
        )
    for r in results:
        for u in r.unmatched:
            out.append(f"  unmatched {r.page}:{u['line']}: {u['number']!r} in …{u['context']}…")
    return "\n".join(out)
