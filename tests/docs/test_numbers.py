"""Every number in the prose of README.md and docs/*.md is generated, tied to a JSON key (or
a config's setting), a default of the code, or allowed as a non-measurement (docs/numbers.yaml;
rules in studies.numbers), and no entry vouches for numbers of several sections."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest
import yaml

from studies import claims as C
from studies import numbers as N

ROOT = Path(__file__).resolve().parents[2]
SPEC = yaml.safe_load((ROOT / "docs" / "numbers.yaml").read_text())["pages"]
PAGES = [str(p.relative_to(ROOT)) for p in N.pages(ROOT)]


def _specs(page: str) -> list[tuple[str, dict]]:
    """(key, spec) of every tie of the page's `numbers:`; an entry holding a list (one spec per
    occurrence it covers, in page order) gives one pair per element. An element is a value
    spec (`file`, `path`, ...), `{default: NAME or [NAMES]}` (a default of the code) or
    `{allow: REASON}` (a non-measurement)."""
    return [
        (k, spec)
        for k, v in (SPEC[page].get("numbers") or {}).items()
        for spec in (v if isinstance(v, list) else [v])
    ]


def _tied(page: str) -> list[tuple[str, C.Value]]:
    return [
        (k, C.Value.from_spec(k, s))
        for k, s in _specs(page)
        if "default" not in s and "allow" not in s
    ]


def _defaults(page: str) -> list[tuple[str, str | list[str]]]:
    """(key, name or names) of the page's `defaults:` and of list elements `{default: ...}`."""
    listed = [(k, s["default"]) for k, s in _specs(page) if "default" in s]
    return [*(SPEC[page].get("defaults") or {}).items(), *listed]


def _untied(page: str) -> list[N.Found]:
    return N.untied(ROOT, page, SPEC[page])


def test_every_page_is_listed():
    assert sorted(SPEC) == sorted(PAGES), "docs/numbers.yaml must list every page"


@pytest.mark.parametrize("page", PAGES)
def test_every_number_has_a_source(page):
    """A number of the prose that is not generated, tied, a checked default or allowed fails:
    tie it in docs/numbers.yaml (`python -m studies.numbers --tie PAGE` proposes ties), say it
    once where it is tied, or remove it."""
    untied = _untied(page)
    shown = "\n".join(f"  {page}:{f.line}: {f.text!r} in …{f.context}…" for f in untied[:40])
    assert not untied, f"{page}: {len(untied)} numbers without a source (first 40):\n{shown}"


@pytest.mark.parametrize("page", PAGES)
def test_no_entry_vouches_for_several_sections(page):
    """An unscoped key whose numbers stand in several `##` sections would tie unrelated
    numbers that print alike to one source: scope it ("0.047 @ 13."), one entry per section."""
    spread = N.spanning((ROOT / page).read_text(), SPEC[page])
    assert not spread, f"{page}: keys covering several sections (scope them): {spread}"


@pytest.mark.parametrize("page", [p for p in PAGES if SPEC.get(p, {}).get("numbers")])
def test_a_list_entry_has_one_source_per_occurrence(page):
    """An entry whose number the page prints several times with different sources lists one
    spec per occurrence it covers, in page order: the count must match the page."""
    found = N.numbers((ROOT / page).read_text())
    for key, specs in (SPEC[page].get("numbers") or {}).items():
        if isinstance(specs, list):
            covered = [f for f in found if N.covers(key, f)]
            assert len(specs) == len(covered), (
                f"{page} {key!r}: {len(specs)} sources for {len(covered)} occurrences "
                f"(lines {[f.line for f in covered]})"
            )
            for spec in specs:
                kinds = {"file", "default", "allow"} & set(spec)
                assert len(kinds) == 1, f"{page} {key!r}: an element is one of {kinds}: {spec}"
                assert "allow" not in spec or spec["allow"].strip(), f"{page} {key!r}: no reason"


@pytest.mark.parametrize("page", [p for p in PAGES if SPEC.get(p, {}).get("numbers")])
def test_every_tied_number_is_its_json_value(page):
    for label, v in _tied(page):
        got = v.rounded(C.measured(v, ROOT))
        assert math.isclose(got, v.value, rel_tol=1e-9, abs_tol=1e-12), (
            f"{page} {label!r}: {v.file} {v.path} gives {got}, the page says {v.value}"
        )
        printed = float(N.split_key(label)[0].rstrip("k%×").replace(",", ""))
        assert math.isclose(printed, abs(v.value), rel_tol=1e-9, abs_tol=1e-12), (
            f"{page} {label!r}: the entry's value {v.value} is not the number printed"
        )


@pytest.mark.parametrize("page", [p for p in PAGES if _defaults(p)])
def test_every_default_is_the_codes_value(page):
    for label, names in _defaults(page):
        printed = float(N.split_key(label)[0].rstrip("k%×").replace(",", ""))
        for name in [names] if isinstance(names, str) else names:
            got = N.code_default(name)
            assert isinstance(got, (int, float)) and not isinstance(got, bool), (page, name, got)
            assert math.isclose(float(got), printed, rel_tol=1e-12), (
                f"{page} {label!r}: {name} is {got}, the page says {label}"
            )


def test_a_code_default_reads_dataclass_fields_and_constants(tmp_path, monkeypatch):
    """Read from the source without importing it: fields, field(default=...), constant
    arithmetic, dict keys; a missing name is an error, not a silent None."""
    (tmp_path / "pkg_defaults").mkdir()
    (tmp_path / "pkg_defaults" / "__init__.py").write_text("")
    (tmp_path / "pkg_defaults" / "mod.py").write_text(
        "import dataclasses\n"
        "BLOCK = 6 << 20\n"
        "TOL: float = -1e-3\n"
        "PRESETS = {'tiny': {'d_model': 256}}\n"
        "@dataclasses.dataclass\n"
        "class Options:\n"
        "    rank: int = 8\n"
        "    tokens: int = 65_536\n"
        "    lr: float = dataclasses.field(default=2e-4)\n"
        "    names: list = dataclasses.field(default_factory=list)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    got = {
        n: N.code_default(f"pkg_defaults.mod.{n}")
        for n in ("BLOCK", "TOL", "PRESETS.tiny.d_model", "Options.rank", "Options.tokens")
    }
    assert got == {
        "BLOCK": 6 * 2**20,
        "TOL": -0.001,
        "PRESETS.tiny.d_model": 256,
        "Options.rank": 8,
        "Options.tokens": 65536,
    }
    assert N.code_default("pkg_defaults.mod.Options.lr") == 2e-4
    for missing in ("Options.alpha", "NOPE", "PRESETS.mini"):
        with pytest.raises(LookupError):
            N.code_default(f"pkg_defaults.mod.{missing}")


@pytest.mark.parametrize("page", PAGES)
def test_no_stale_entry(page):
    """Every tied, default or allowed number still occurs in the page's prose (a scoped one
    under its heading)."""
    found = N.numbers((ROOT / page).read_text())
    entry = SPEC[page]
    for label in [x for k in N.KINDS for x in entry.get(k) or {}]:
        assert any(N.covers(label, f) for f in found), (
            f"{page}: {label!r} is listed but not in the prose"
        )


def test_a_changed_json_value_fails_its_number(tmp_path):
    _, v = _tied("README.md")[0]
    data = copy.deepcopy(C.load_json(v.file, ROOT))
    node = data
    *head, last = v.path.split("/")
    for key in head:
        node = node[key]
    node[last] = node[last] * 2 + 1
    (tmp_path / Path(v.file).parent).mkdir(parents=True)
    (tmp_path / v.file).write_text(json.dumps(data))
    assert not math.isclose(v.rounded(C.measured(v, tmp_path)), v.value)


def test_the_extractor_skips_code_references_names_and_generated_blocks():
    page = "\n".join(
        [
            "## 13. A heading",
            "1. a list item with 12.5 in it, `inline 99.9`, GPT-2 and SmolLM2-135M,",
            "   §5.3, Table 1 and Figures 3–4, rows 21–24, seeds 0–7, step 26 (2026-11-24, 11:38),",
            "   Python 3.12.3, a link [x](docs/a-1.5.md) and 362k tokens/s.",
            "```bash",
            "tying train max_steps=77.7",
            "```",
            "<!-- generated: by a tool -->",
            "| 44.4 |",
            "<!-- end generated -->",
            "the end: 0.25 and −3.5",
        ]
    )
    assert [f.text for f in N.numbers(page)] == ["12.5", "362k", "0.25", "3.5"]
    assert [f.line for f in N.numbers(page)] == [2, 4, 11, 11]


def test_indented_code_blocks_are_code_but_list_continuations_are_prose():
    page = "\n".join(
        [
            "Measured by",
            "",
            "    python bench.py --tokens 1024 --out 77.5",
            "        --steps 2048",
            "",
            "- an item with 12.5",
            "",
            "    its second paragraph, 13.5",
            "`code` at the start of a line, then 14.5",
            "",
            "`code` after a blank line is not indented: 15.5",
        ]
    )
    assert [f.text for f in N.numbers(page)] == ["12.5", "13.5", "14.5", "15.5"]


def test_exit_statuses_are_allowed_only_as_exit_statuses():
    """0, 1, 2, 130 and 143 right after "exit (status|code)"/"exits (with)" are constants of the
    command line; the same digits elsewhere, or another number after "exit", are counted."""
    page = "\n".join(
        [
            "exits with status 2; exit status 130/143; SIGTERM exits 143; (exit 2);",
            "and exits",
            "with 130 (SIGINT) or 143 (SIGTERM).",
            "Counted: exit status 3, exits after 2 steps, 130 steps, status 2.5, 143 s.",
        ]
    )
    assert [f.text for f in N.numbers(page)] == ["3", "2", "130", "2.5", "143"]


def test_the_claims_table_is_a_generated_block():
    text = (ROOT / "docs" / "results.md").read_text()
    blanked = N.prose(text)
    table = text[text.index(C.BEGIN) : text.index(C.END)]
    assert re.search(r"\d", table)
    start = text.index(C.BEGIN)
    assert not re.search(r"\d", blanked[start : start + len(table)])


def test_the_listing_names_each_uncovered_number_and_spanning_key(tmp_path, capsys):
    """`python -m studies.numbers` prints what the tests above would fail on, and exits 1."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# R\n\n## A\n\nA 12.5 and 3.75.\n\n## B\n\nB 3.75.\n")
    (tmp_path / "docs" / "numbers.yaml").write_text(
        'pages:\n  README.md:\n    allow:\n      "3.75": a constant\n'
    )
    assert N.main(["--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "README.md:5: '12.5'" in out and "1 numbers without a source" in out
    assert "'3.75' is in 2 sections" in out and "1 keys span sections" in out
    (tmp_path / "README.md").write_text("# R\n\n## A\n\nA 3.75.\n")
    assert N.main(["--root", str(tmp_path)]) == 0


def test_a_number_can_be_tied_to_an_experiment_config(tmp_path):
    """A `.yaml` file is read as YAML (a config's setting), any other file as JSON."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "x.yaml").write_text("train:\n  max_steps: 260\n  lr: 3.0e-4\n")
    steps = C.Value(name="260", file="configs/x.yaml", path="train/max_steps", value=260, digits=0)
    lr = C.Value(name="3e-4", file="configs/x.yaml", path="train/lr", value=3e-4, sig=1)
    assert C.value_matches(steps, tmp_path) and C.value_matches(lr, tmp_path)
    (tmp_path / "configs" / "x.yaml").write_text("train:\n  max_steps: 130\n  lr: 3.0e-4\n")
    C._JSON_CACHE.clear()
    assert not C.value_matches(steps, tmp_path)


SCOPED_PAGE = """# Title

0.047 before any section.

## 4. Alignment

Untied 0.047 and 8 seeds.

### 4a. A table

| run | 0.047 |

## 13. Teacher mode

The 0.047 of another table.
"""


def test_a_scoped_key_covers_its_sections_numbers_only():
    """ "0.047 @ 4." ties the 0.047s under a heading that starts with "4." (and its
    subsections), not those of §13 or above the first section; a key without a scope covers the
    page, and `spanning` names it when its numbers lie in several `##` sections."""
    found = [f for f in N.numbers(SCOPED_PAGE) if f.text == "0.047"]
    assert [f.section for f in found] == ["", "4. Alignment", "4. Alignment", "13. Teacher mode"]
    assert [N.covers("0.047 @ 4.", f) for f in found] == [False, True, True, False]
    assert [N.covers("0.047 @ 4a.", f) for f in found] == [False, False, True, False]
    assert all(N.covers("0.047", f) for f in found)
    assert not N.covers("0.04 @ 4.", found[1])
    entry = {"numbers": {"0.047 @ 4.": {}, "0.047 @ 13.": {}}, "allow": {"8": "seeds"}}
    assert [f.text for f in N.untied_in(SCOPED_PAGE, entry)] == ["0.047"]  # the one above §4
    assert N.spanning(SCOPED_PAGE, entry) == {}
    assert N.spanning(SCOPED_PAGE, {"numbers": {"0.047": {}}}) == {
        "0.047": ["", "13. Teacher mode", "4. Alignment"]
    }
    assert N.split_key("1,319 @ 14b.") == ("1,319", "14b.")
    code_heading = N.numbers("# T\n\n## `tying demo --steps 4`\n\nIt ran 12 steps.\n")
    assert [f.section for f in code_heading] == ["`tying demo --steps 4`"]
    assert [N.covers("0.047 @ Title", f) for f in found] == [True, False, False, False]
    assert [N.scope_of(f) for f in found] == [
        "Title",
        "4. Alignment",
        "4. Alignment",
        "13. Teacher mode",
    ]


def test_a_value_is_a_mean_over_every_kth_record(tmp_path):
    """`bases/*/loss` with `slice: [1, 8, 4]` is the mean of the losses of records 1 and 5
    (interleaved groups: record = seed·4 + arm), and agrees with a naive loop."""
    bases = [{"arm": i % 4, "loss": float(i * i)} for i in range(8)]
    (tmp_path / "r.json").write_text(json.dumps({"bases": bases}))
    v = C.Value(
        name="13", file="r.json", path="bases/*/loss", value=13.0, digits=0, slice=(1, 8, 4)
    )
    naive = sum(b["loss"] for b in bases if b["arm"] == 1) / 2
    assert C.measured(v, tmp_path) == naive == 13.0
    assert C.lookup({"bases": bases}, "bases/*/arm") == [0, 1, 2, 3, 0, 1, 2, 3]


def test_no_key_is_given_twice():
    """YAML keeps the last of two equal keys silently: a page's entry given twice (two ties of
    one number, one of them lost) fails here instead."""

    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
        keys = [loader.construct_object(k) for k, _ in node.value]
        twice = sorted({str(k) for k in keys if keys.count(k) > 1})
        assert not twice, f"docs/numbers.yaml line {node.start_mark.line + 1}: given twice: {twice}"
        return loader.construct_mapping(node)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    yaml.load((ROOT / "docs" / "numbers.yaml").read_text(), Loader=Strict)
    with pytest.raises(AssertionError, match="given twice"):
        yaml.load('pages:\n  a.md:\n    numbers:\n      "8": {}\n      "8": {}\n', Loader=Strict)


def test_a_list_element_may_be_a_default_or_an_allow_reason(monkeypatch):
    """A list entry's elements are read by kind: value specs are checked against their file,
    `{default: NAME}` against the code, `{allow: REASON}` only for its reason."""
    spec = {"file": "docs/results/report.json", "path": "config/train/seq_len", "value": 256}
    page = {
        "numbers": {
            "256 @ 4.": [
                spec,
                {"default": "tying.decoder.presets.PRESETS.tiny.d_model"},
                {"allow": "a shape"},
            ]
        }
    }
    monkeypatch.setitem(SPEC, "x.md", page)
    assert [v.path for _, v in _tied("x.md")] == ["config/train/seq_len"]
    assert _defaults("x.md") == [("256 @ 4.", "tying.decoder.presets.PRESETS.tiny.d_model")]
    assert N.code_default(_defaults("x.md")[0][1]) == 256
