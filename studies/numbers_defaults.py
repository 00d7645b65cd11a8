"""Tie a page's untied numbers to the defaults of the code (docs/numbers.yaml, `defaults:`).

    python -m studies.numbers --tie-defaults docs/model.md [PAGE ...]   # or --tie-defaults-all

Many numbers of the docs are not measurements but settings the code holds. This proposer
(`studies.numbers.tie_defaults` runs it and writes the ties) reads them from the source the
way `studies.numbers.code_default` checks them: with `ast`, nothing imported.

1. The candidates (`collect`): the numeric defaults of the dataclass fields of the modules
   under `DATACLASS_MODULES` (the options layer and the decoder's `ModelConfig`), the
   module-level UPPER_CASE numeric constants of every module of the package, and the numeric
   leaves of the dict constants of `DICT_CONSTANTS` (`tying.decoder.presets.PRESETS.tiny.d_model`).
   Booleans, negative values and values of ≤ 0 are left out (a page prints no sign that the
   check of tests/docs/test_numbers.py could compare).
2. A default matches one occurrence of a number when its value is the printed value exactly
   AND the words around the occurrence name the field: in a table, the row's first cell, the
   cell and its column's header; elsewhere the part of its sentence from `WINDOW_BEFORE`
   characters before the number to `WINDOW_AFTER` after it. A field is named by its full
   name ("d_model", "global_batch_tokens"), a part of its name that is not `GENERIC`
   ("batch", "warmup", "rank") or a word of `SYNONYMS` ("width", "learning rate", "L").
   A match by value alone is not one.
3. Where the words name a preset ("tiny", "xl"...), a leaf of another preset is not a match.
4. The number (a label of the page: one entry ties every occurrence) is tied only when every
   occurrence of it on the page matches; its names are those with the most field words
   shared with each occurrence's words (ties kept: "8" may be the LoRA rank and its batch
   size), at most `MAX_NAMES` of them, else the number is ambiguous and left for review.
5. The ties are written into the page's `defaults:` block.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

from studies import numbers_tie as T
from studies.code_source import assigned, constant
from studies.number_text import NUMBER

#: The modules (dotted prefixes) whose dataclass fields are candidates.
DATACLASS_MODULES = ("tying.options", "tying.decoder.config")
#: The dict constants whose numeric leaves are candidates (other dicts, such as the example
#: budget's `TINY`, hold the settings of one small run, whose words name nothing a page means).
DICT_CONSTANTS = ("PRESETS",)
#: The names of the presets (`tying.decoder.presets.PRESETS`): a sentence that names one
#: excludes the leaves of the others.
PRESET_NAMES = frozenset({"tiny", "mini", "small", "medium", "large", "xl"})
#: Parts of a field's name that do not by themselves say which field a number is.
_GENERIC_WORDS = """n num d k s max min total size default every per ratio factor dim count len
    model tokens token steps step seconds per_step value values top first last block blocks
    rate new old name use demo"""
GENERIC = frozenset(_GENERIC_WORDS.split())
#: A field's name or a part of it -> further words a page uses for it.
SYNONYMS: dict[str, frozenset[str]] = {
    "d_model": frozenset({"d", "width", "d_model"}),
    "n_layers": frozenset({"l", "layers", "depth"}),  # "layer 4" is an index, not a count
    "n_heads": frozenset({"h", "heads"}),
    "n_kv_heads": frozenset({"kv"}),
    "head_dim": frozenset({"head_dim"}),
    "d_ff": frozenset({"d_ff", "ffn", "swiglu", "mlp"}),
    "vocab_size": frozenset({"v", "vocabulary", "vocab"}),
    "lr": frozenset({"lr", "learning"}),
    "warmup": frozenset({"warmup"}),  # "warm-up" is read as "warmup" (`sentence_words`)
    "seq": frozenset({"seq", "sequence", "sequences", "context"}),
    "eval": frozenset({"eval", "evaluation", "evaluates", "evaluated", "validation"}),
    "grad": frozenset({"grad", "gradient"}),
    "clip": frozenset({"clip", "clipping", "clipped"}),
    "beta1": frozenset({"beta1", "β1", "β₁"}),
    "beta2": frozenset({"beta2", "β2", "β₂"}),
    "eps": frozenset({"eps", "epsilon", "ε"}),
    "rope": frozenset({"rope", "rotary"}),
    "theta": frozenset({"theta", "θ"}),
    "temperature": frozenset({"temperature", "τ"}),
    "alpha": frozenset({"alpha", "α"}),
}
#: Field words that name other things too, so that a sentence must also name the field's
#: dataclass ("8 ranks" of a GPU run are not the LoRA rank of `FinetuneOptions.rank`).
AMBIGUOUS = frozenset({"rank"})
#: Characters of a prose sentence before / after a number that name its field.
WINDOW_BEFORE = 60
WINDOW_AFTER = 30
#: A number whose occurrences name more fields (of its value) than this is left for review.
MAX_NAMES = 3
_TOKEN = re.compile(r"[A-Za-zα-ωΑ-Ω][A-Za-z0-9_α-ωΑ-Ω₀-₉]*")
_UPPER = re.compile(r"[A-Z][A-Z0-9_]*")


@dataclass(frozen=True)
class Default:
    """A numeric default of the code: its dotted name, its value and the words naming it."""

    name: str
    value: float
    #: the words any one of which names the field in a sentence (see the module's docstring)
    words: frozenset[str]
    #: the preset of a `PRESETS` leaf, else None
    preset: str | None = None
    #: the words of its class and module ("train", "finetune", "fit"): asked for where
    #: another dataclass has a field of the same name (`collect`)
    owner: frozenset[str] = frozenset()
    #: its words that fields of other dataclasses have too ("lr", "batch"): a sentence that
    #: names the field by these alone must also name its dataclass
    common: frozenset[str] = frozenset()


def field_words(field_name: str) -> frozenset[str]:
    """The words that name a field or constant in a sentence: its full name, its parts that
    are not `GENERIC` (a plural's "s" dropped too) and their `SYNONYMS`. "d_model" ->
    {"d_model", "d", "width"}; "n_layers" -> {"n_layers", "layers", "l", "depth"} (a plural
    part stays plural: "layer 4" names a position); "global_batch_tokens" -> {"global_batch_tokens", "global",
    "batch"}; "LR_WARMUP" -> {"lr_warmup", "lr", "learning", "warmup", "warm"}."""
    name = field_name.lower()
    out = ({name} - GENERIC) | SYNONYMS.get(name, frozenset())  # "tokens" alone says nothing
    if "_" not in name:
        out |= {p.lower() for p in re.findall(r"[A-Z]?[a-z0-9]+", field_name)} - GENERIC
    for part in name.split("_"):
        if not part or part in GENERIC:
            continue
        out |= {part} | SYNONYMS.get(part, frozenset())  # a plural stays plural: "layers"
    return frozenset(out)


def sentence_words(text: str) -> frozenset[str]:
    """The words of a sentence, lower case, as they are and with a plural's "s" dropped;
    "warm-up" and "fine-tune" are read as one word; single letters are dropped (a single
    letter names a field only right before its number: `occurrence`)."""
    out = set()
    text = re.sub(r"(?i)\b(warm|fine)[- ](up|tun\w*)", r"\1\2", text)
    for w in _TOKEN.findall(text):
        w = w.lower()
        if len(w) < 2:
            continue
        out.add(w)
        if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
            out.add(w[:-1])
    return frozenset(out)


def _numeric(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _modules(package: str) -> list[tuple[str, Path]]:
    """(dotted name, source file) of every module of `package`, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    out = []
    for root in map(Path, spec.submodule_search_locations):
        for path in sorted(root.rglob("*.py")):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out.append((".".join(parts), path))
    return out


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(d) for d in node.decorator_list)


def collect(
    package: str = "tying", dataclass_modules: tuple[str, ...] = DATACLASS_MODULES
) -> list[Default]:
    """The numeric defaults of `package` (see the module's docstring), read from its source
    the way `studies.code_source.code_default` reads a name back."""
    out: list[Default] = []

    def add(name: str, node: ast.AST, last: str, owner: frozenset[str] = frozenset()) -> None:
        try:
            value = constant(node)
        except (ValueError, TypeError, SyntaxError, KeyError, ZeroDivisionError):
            return
        if _numeric(value):
            out.append(Default(name, float(value), field_words(last), owner=owner))
        elif isinstance(value, dict) and last in DICT_CONSTANTS:
            _dict_leaves(name, value, out)

    for module, path in _modules(package):
        tree = ast.parse(path.read_text())
        fields = any(module == m or module.startswith(m + ".") for m in dataclass_modules)
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef) and fields and _is_dataclass(stmt):
                for s in stmt.body:
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
                        node = assigned([s], s.target.id)
                        if node is not None and not isinstance(node, ast.Call):
                            owner = owner_words(module, stmt.name)
                            add(f"{module}.{stmt.name}.{s.target.id}", node, s.target.id, owner)
                continue
            targets = [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
            targets += getattr(stmt, "targets", []) if isinstance(stmt, ast.Assign) else []
            for t in targets:
                if isinstance(t, ast.Name) and _UPPER.fullmatch(t.id) and stmt.value is not None:
                    add(f"{module}.{t.id}", stmt.value, t.id)
    owners: dict[str, set[str]] = {}  # a field word -> the dataclasses with a field of it
    for d in out:
        if d.owner:
            for w in d.words:
                owners.setdefault(w, set()).add(d.name.rsplit(".", 1)[0])
    return [
        replace(d, common=frozenset(w for w in d.words if len(owners[w]) > 1 or w in AMBIGUOUS))
        if d.owner
        else d
        for d in out
    ]


#: Words of a class or module name that do not say which command it configures.
_OWNER_GENERIC = frozenset({"tying", "options", "option", "config", "common", "decoder"})
#: A class or module word -> further words a page uses for it.
_OWNER_SYNONYMS = {
    "train": {"training", "trains", "trained"},
    "finetune": {"finetuning", "lora", "adapter"},
    "fit": {"fitted", "fitting", "fits"},
    "probe": {"probes", "probing"},
    "lens": {"lenses"},
    "model": {"preset", "presets"},
}


def owner_words(module: str, cls: str) -> frozenset[str]:
    """The words that name a dataclass's command: the parts of its module's last name and of
    its class name ("tying.options.finetune", "FinetuneOptions" -> {"finetune", "lora",
    ...}); "SideEffectsOptions" -> {"side", "effects", "effect", ...}."""
    parts = {module.rsplit(".", 1)[-1].lower(), *module.rsplit(".", 1)[-1].lower().split("_")}
    parts |= {p.lower() for p in re.findall(r"[A-Z][a-z0-9]*", cls)}
    out = set()
    for p in parts - _OWNER_GENERIC:
        out |= {p} | _OWNER_SYNONYMS.get(p, set())
        if len(p) > 3 and p.endswith("s"):
            out.add(p[:-1])
    return frozenset(out)


def _dict_leaves(name: str, value: dict, out: list[Default]) -> None:
    """The numeric leaves of a dict constant of `DICT_CONSTANTS`, two levels deep at most
    (`PRESETS.tiny.d_model`); a preset's leaf remembers its preset."""
    for k, v in value.items():
        if not isinstance(k, str) or not re.fullmatch(r"\w+", k):
            continue
        if _numeric(v):
            out.append(Default(f"{name}.{k}", float(v), field_words(k)))
        elif isinstance(v, dict):
            preset = k if name.endswith(".PRESETS") else None
            for k2, v2 in v.items():
                if isinstance(k2, str) and re.fullmatch(r"\w+", k2) and _numeric(v2):
                    out.append(Default(f"{name}.{k}.{k2}", float(v2), field_words(k2), preset))


#: A unit right after a number -> the words one of which the field's name must hold.
_UNITS: tuple[tuple[re.Pattern[str], frozenset[str]], ...] = (
    (re.compile(r"\s?(?:%|percent\b)"), frozenset({"percent", "pct"})),
    (re.compile(r"\s?(?:ms|milliseconds?)\b"), frozenset({"ms"})),
    (re.compile(r"\s?(?:s|sec|seconds?)\b"), frozenset({"s", "seconds"})),
    (re.compile(r"\s?(?:min|minutes?|h|hours?)\b"), frozenset({"min", "minutes", "h"})),
    (re.compile(r"\s?(?:[KMGT]i?B|bytes?)\b"), frozenset({"bytes", "mib", "gib", "mb"})),
    (re.compile(r"\s?[×x]"), frozenset({"times", "ratio", "scale", "factor"})),
)
_CLAUSE_STOP = ",;:()[]{}|.!?"


@dataclass(frozen=True)
class Occurrence:
    """What names the number at one place of a page: the words of its clause (a table cell:
    its row's head, cell and column header), the single letter right before it ("d 768",
    "V = 50,257"), the words of its whole sentence (for a preset's name), the words of the
    page's name and section heading (for the dataclass a field belongs to) and the unit words a field must hold (a number followed by "s", "%", "MiB" ...)."""

    words: frozenset[str]
    sentence: frozenset[str]
    unit: frozenset[str] | None = None
    #: the words of the page's name and its section's heading (`topic`)
    topic: frozenset[str] = frozenset()


def occurrence(markdown: str, start: int, length: int) -> Occurrence:
    """The `Occurrence` of the number at `start` (`length` characters) of the page: in a
    table, its row's head, its cell and its column's header (`numbers_tie.sentence`; a
    header that is a single letter counts); in prose, the clause around it, which ends at
    punctuation, at another number and `WINDOW_BEFORE` / `WINDOW_AFTER` characters away."""
    whole = T.sentence(markdown, start)
    after = markdown[start + length : start + length + 12]
    unit = next((u for pattern, u in _UNITS if pattern.match(after)), None)
    line_start = markdown.rfind("\n", 0, start) + 1
    row = markdown[line_start : markdown.find("\n", start) % (len(markdown) + 1)]
    if row.lstrip().startswith("|"):
        cell_lo = markdown.rfind("|", line_start, start)
        cell_hi = markdown.find("|", start)
        cell = markdown[cell_lo + 1 : cell_hi if cell_hi >= 0 else None]
        if markdown[line_start:cell_lo].strip() == "":
            return Occurrence(frozenset(), frozenset(), unit)  # the row's head: a label
        if len(NUMBER.findall(cell)) > 1:
            return _clause(markdown, start, length, sentence_words(whole), unit)
        letters = {c.strip().lower() for c in re.split(r"[|]", whole) if len(c.strip()) == 1}
        header = whole.rsplit(" ", 1)[-1] if whole else ""
        letters |= {header.lower()} if len(header) == 1 and header.isalpha() else set()
        return Occurrence(sentence_words(whole) | letters, sentence_words(whole), unit)
    return _clause(markdown, start, length, sentence_words(whole), unit)


def _clause(
    markdown: str, start: int, length: int, sentence: frozenset[str], unit: frozenset[str] | None
) -> Occurrence:
    """The `Occurrence` of a number in prose (or in a table cell holding several numbers):
    the words of its clause and the single letter right before it."""
    lo = start
    while lo > max(0, start - WINDOW_BEFORE) and not (
        markdown[lo - 1] in _CLAUSE_STOP and not markdown[lo - 1 : lo + 1].strip(".,").isdigit()
    ):
        if markdown[lo - 1].isdigit() and lo < start - 1 and not markdown[lo].isalnum():
            break  # another number's end
        lo -= 1
    hi = start + length
    while hi < min(len(markdown), start + length + WINDOW_AFTER) and markdown[hi] not in (
        _CLAUSE_STOP + "0123456789"
    ):
        hi += 1
    clause = markdown[lo:start] + " " + markdown[start + length : hi]
    words = set(sentence_words(clause))
    letter = re.search(r"(?<![\w.])([A-Za-zα-ω])\s*[=:≈]?\s*$", markdown[lo:start])
    if letter:
        words.add(letter.group(1).lower())
    return Occurrence(frozenset(words), sentence, unit)


def topic(page: str, markdown: str, start: int) -> frozenset[str]:
    """The words of the page's name and of the heading of the section the offset `start` is
    in: what the page or section is about ("training", "teacher"), for the dataclass a
    field of a common name belongs to."""
    heads = list(re.finditer(r"(?m)^#{1,6}\s+(.*)$", markdown[:start]))
    head = heads[-1].group(1) if heads else ""
    return sentence_words(Path(page).stem.replace("-", " ") + " " + head)


def matches(defaults: list[Default], value: float, occ: Occurrence) -> list[Default]:
    """The defaults of `value` that the occurrence `occ` names, best first (most field words
    shared, a single letter counting half); only the best level is returned. A field of a
    named only by words that fields of other dataclasses have too ("lr", "batch") is named
    only where the clause, its section's heading or the page's name also names its
    dataclass ("train", "fine-tune", "fit"; a dataclass named elsewhere in a long sentence
    may be another step of it: the demo's "batch 4" is not the side effects' batch_size); a number followed by a unit only by a field
    whose name holds the unit ("timeout_s")."""
    words = occ.words
    named = PRESET_NAMES & (words | occ.sentence)
    scored = []
    for d in defaults:
        if not math.isclose(d.value, value, rel_tol=1e-12, abs_tol=0.0):
            continue
        if d.preset is not None and named and d.preset not in named:
            continue
        last = d.name.rsplit(".", 1)[-1].lower()
        if occ.unit is not None and not occ.unit & set(last.split("_")):
            continue
        shared = d.words & words
        if shared and shared <= d.common and not d.owner & (words | occ.topic):
            continue  # "lr", "batch": a word of fields of several dataclasses, not its own
        if shared:
            score = sum(0.5 if len(w) == 1 else 1.0 for w in shared)
            scored.append((score + (d.preset in named), d))
    if not scored:
        return []
    best = max(s for s, _ in scored)
    return [d for s, d in scored if s == best]


@dataclass
class DefaultsResult:
    """What the defaults proposer found for one page."""

    page: str
    #: number as printed -> the dotted names it is tied to
    ties: dict[str, list[str]]
    untied_before: int
    untied_after: int
    #: equal to a default, but no occurrence's words name one of that value
    value_only: list[str]
    #: some occurrences name a default of the value, others do not
    partly: list[str]
    #: more than MAX_NAMES fields named
    ambiguous: list[str]


def propose(
    page: str, markdown: str, untied: list[T.Number], defaults: list[Default]
) -> DefaultsResult:
    """The default ties of the `untied` numbers of `page` (nothing is written)."""
    by_label: dict[str, list[T.Number]] = {}
    for f in untied:
        by_label.setdefault(f.text, []).append(f)
    values = {d.value for d in defaults}
    ties: dict[str, list[str]] = {}
    value_only: list[str] = []
    partly: list[str] = []
    ambiguous: list[str] = []
    for label, found in by_label.items():
        if label.endswith("k"):
            continue  # "16k" prints thousands: the check compares the printed value
        try:
            value = T._value(label)
        except ValueError:
            continue
        if not any(math.isclose(value, v, rel_tol=1e-12) for v in values):
            continue
        per = []
        for f in found:
            occ = occurrence(markdown, f.start, len(label))
            occ = replace(occ, topic=topic(page, markdown, f.start))
            per.append(matches(defaults, value, occ))
        if not any(per):
            value_only.append(label)
            continue
        if not all(per):
            partly.append(label)
            continue
        names = list(dict.fromkeys(d.name for m in per for d in m))
        if len(names) > MAX_NAMES:
            ambiguous.append(label)
            continue
        ties[label] = names
    after = sum(1 for f in untied if f.text not in ties)
    return DefaultsResult(page, ties, len(untied), after, value_only, partly, ambiguous)


def entry_line(label: str, names: list[str]) -> str:
    """One line of a page's `defaults` mapping, in the file's style."""
    value = names[0] if len(names) == 1 else f"[{', '.join(names)}]"
    return f'      "{label}": {value}'


def write_defaults(path: Path, page: str, lines: list[str]) -> None:
    """Add `lines` (entries of `defaults`) to `page`'s block of the YAML file at `path` (after
    its existing defaults, else after its `numbers`, else first); the rest of the file is kept
    as it is."""

    def insert(block: str) -> str:
        if not lines:
            return block
        new = "".join(f"{x}\n" for x in lines)
        existing = re.search(r"(?m)^    defaults:\n((?:      [^\n]*\n)*)", block)
        numbers = re.search(r"(?m)^    numbers:\n((?:      [^\n]*\n)*)", block)
        if existing is not None:
            return block[: existing.end()] + new + block[existing.end() :]
        if numbers is not None:
            return block[: numbers.end()] + "    defaults:\n" + new + block[numbers.end() :]
        return "    defaults:\n" + new + block

    T.update_page_block(path, page, insert)


def report(results: list[DefaultsResult]) -> str:
    """The proposer's report: per page, tied and left, and what equals a default unnamed."""
    out = []
    for r in results:
        out.append(
            f"{r.page}: tied {len(r.ties)} to defaults, untied {r.untied_before} -> "
            f"{r.untied_after}; equal to a default but not tied: {len(r.value_only)} (no "
            f"occurrence names the field), {len(r.partly)} (not every occurrence does), "
            f"{len(r.ambiguous)} (more than {MAX_NAMES} fields named)"
        )
    for r in results:
        for label, names in r.ties.items():
            out.append(f"  tied {r.page}: {label!r} -> {', '.join(names)}")
    return "\n".join(out)
