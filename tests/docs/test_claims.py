"""The claims table of docs/results.md: every number comes from its JSON, the table in the page is
the generated one, and every paper number, table, figure and section the docs cite exists in that
paper's text (the folder `papers` beside the data folder, ../shared/papers by default; skipped
where it is absent)."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import pytest

from studies import claims as C
from tying.paths import data_dir

ROOT = Path(__file__).resolve().parents[2]
#: ../shared/papers, or `papers` beside $TYING_DATA_DIR (as the GPU session carries them).
PAPERS_DIR = data_dir().parent / "papers"
CLAIMS = C.load_claims(ROOT / "docs" / "results" / "claims.yaml")


def _paper_text(prefix: str) -> str:
    if not PAPERS_DIR.is_dir():
        pytest.skip(f"the papers are not at {PAPERS_DIR} (beside the data folder)")
    files = sorted(PAPERS_DIR.glob(f"{prefix}_*.txt"))
    if not files:
        pytest.skip(f"no {prefix}_*.txt in {PAPERS_DIR}")
    return files[0].read_text()


def _values():
    return [
        pytest.param(c, v, id=f"{i + 1}-{v.name}")
        for i, c in enumerate(CLAIMS)
        for v in c.values.values()
    ]


@pytest.mark.parametrize(("claim", "value"), _values())
def test_every_number_of_the_table_is_its_json_value(claim, value):
    got = value.rounded(C.measured(value, ROOT))
    assert got == pytest.approx(value.value, rel=1e-9, abs=1e-12), (
        f"{claim.where} {{{value.name}}}: {value.file} {value.path} gives {got}, "
        f"the table says {value.value}"
    )


def test_templates_hold_no_number_of_their_own():
    """A measured decimal in `ours`, `interval` or `excluded` must come from a placeholder; a
    literal decimal there is allowed only when it is one of the paper's numbers of the row."""
    for c in CLAIMS:
        for template in (c.ours, c.interval, c.note, c.n):
            bare = C._PLACEHOLDER.sub("", template)
            for number in C._DECIMAL.findall(bare):
                assert number.lstrip("-") in c.paper_number, (
                    f"{c.where}: literal {number} in {template!r} is not a JSON value"
                )


def test_every_verdict_is_one_of_the_four():
    judged = C.judge(CLAIMS, ROOT)
    verdicts = [judged[i].verdict if i in judged else c.verdict for i, c in enumerate(CLAIMS)]
    assert set(verdicts) <= set(C.VERDICTS)
    untested = [c for c, v in zip(CLAIMS, verdicts, strict=True) if v == "not tested"]
    assert all(not c.values for c in untested), "a row that says 'not tested' shows numbers"


def test_a_verdict_by_hand_only_without_units_and_with_its_reason():
    for i, c in enumerate(CLAIMS, 1):
        if c.ruled:
            assert not c.verdict and not c.reason, f"row {i}: units and a verdict by hand"
        else:
            assert c.verdict in C.VERDICTS and c.reason, f"row {i}: no units and no reason"


def _reference_p(units: list[float]) -> float:
    """The exact p by another route: all units of one sign (none zero) can only be matched by
    the two all-one-sign patterns, p = 2/2^n; otherwise scipy's exact permutation test."""
    from tying.evaluation.stats import sign_flip_test

    if len(units) == 1:
        return 1.0
    if all(u > 0 for u in units) or all(u < 0 for u in units):
        return 2 / 2 ** len(units)
    assert len(units) <= 12, "a mixed row this large would make scipy slow"
    return sign_flip_test(units).p_value


def _naive_holm(ps: list[float]) -> list[float]:
    """Holm by its definition: reject in ascending order while p_(i) ≤ α/(m − i + 1); the
    adjusted p of the i-th smallest is max over j ≤ i of (m − j + 1) p_(j), capped at 1;
    checked against the library's `tying.evaluation.stats.holm` too."""
    from tying.evaluation.stats import holm

    m = len(ps)
    ranked = sorted(ps)
    out = []
    for p in ps:
        i = ranked.index(p)
        out.append(min(1.0, max((m - j) * ranked[j] for j in range(i + 1))))
    assert out == pytest.approx(holm(ps), abs=1e-15)
    return out


def test_the_rule_gives_every_ruled_verdict():
    """The table's verdicts against a recomputation of the stated rule by another route: exact
    two-sided sign-flip p (scipy, or 2/2^n for one-signed units), Holm by hand, ALPHA."""
    judged = C.judge(CLAIMS, ROOT)
    rows = [i for i, c in enumerate(CLAIMS) if c.ruled]
    assert sorted(judged) == rows
    ps = [_reference_p(list(judged[i].units)) for i in rows]
    adjusted = _naive_holm(ps)
    for i, p, q in zip(rows, ps, adjusted, strict=True):
        j = judged[i]
        assert j.p == pytest.approx(p, abs=1e-12), f"row {i + 1}"
        assert j.holm_p == pytest.approx(q, abs=1e-12), f"row {i + 1}"
        mean = sum(j.units) / len(j.units)
        want = "undecided" if q > C.ALPHA else ("reproduced" if mean > 0 else "contradicted")
        assert j.verdict == want, f"row {i + 1}: {j.verdict} != {want}"


def test_the_rule_needs_more_than_two_seeds():
    """Two seeds in the paper's direction cannot decide a row (p = 0.5); nineteen can."""
    two = C.Claim(
        paper="001",
        claim="c",
        where="w",
        paper_number="—",
        ours="",
        n="2",
        values={},
        units=("1.0", "2.0"),
    )
    many = C.Claim(
        paper="001",
        claim="c",
        where="w",
        paper_number="—",
        ours="",
        n="19",
        values={},
        units=tuple(str(-1.0 - k / 10) for k in range(19)),
    )
    judged = C.judge([two, many])
    assert judged[0].p == 0.5 and judged[0].verdict == "undecided"
    assert judged[1].p == pytest.approx(2 / 2**19) and judged[1].verdict == "contradicted"
    assert judged[1].holm_p == pytest.approx(2 * 2 / 2**19)


def test_unit_expressions_evaluate_only_arithmetic():
    assert C.evaluate("abs(a - b) - 0.5", {"a": 1.0, "b": 3.0}) == 1.5
    with pytest.raises(ValueError):
        C.evaluate("__import__('os')", {})
    with pytest.raises(ValueError):
        C.evaluate("c + 1", {"a": 1.0})


def test_results_md_holds_the_generated_table():
    text = (ROOT / "docs" / "results.md").read_text()
    table = C.render(CLAIMS)
    assert table in text, "docs/results.md is out of date: python -m studies.claims --write"
    assert text.index(C.BEGIN) < text.index("\n## 1.")  # the first thing a reviewer reads


def test_a_changed_json_value_is_caught(tmp_path):
    """The check is not vacuous: the same row against a JSON whose number moved fails."""
    c = CLAIMS[0]
    v = next(iter(c.values.values()))
    data = C.load_json(v.file, ROOT)
    import copy
    import json

    moved = copy.deepcopy(data)
    node = moved
    *head, last = v.path.split("/")
    for key in head:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = node[int(last)] + 1.0
    else:
        node[last] = node[last] + 1.0
    (tmp_path / Path(v.file).parent).mkdir(parents=True)
    (tmp_path / v.file).write_text(json.dumps(moved))
    assert not C.value_matches(v, tmp_path)
    assert C.value_matches(v, ROOT)


def test_a_ratio_of_ratios_is_path_times_over(tmp_path):
    """`times` and `over` make (a/b)·d/c from three keys (row 8's per-nat-of-gain ratios)."""
    import json

    (tmp_path / "r.json").write_text(json.dumps({"a": 5.5, "x": {"d": 0.05}, "c": [0.35]}))
    v = C.Value(name="g", file="r.json", path="a", times="x/d", over="c/0", value=0.79, digits=2)
    assert C.measured(v, tmp_path) == 5.5 * 0.05 / 0.35
    assert C.value_matches(v, tmp_path)


def test_row_8_quotes_the_per_nat_of_gain_ratios_of_section_10():
    """Row 8's §10 ratios per nat of gain are KL ratio / gain ratio of the same adapters."""
    data = C.load_json("docs/results/updates_report.json", ROOT)["updates"]
    row = next(c for c in CLAIMS if "side effects of lightweight updates" in c.claim)
    for name, i in (("g1", 0), ("g2", 1)):
        comp = data["comparisons"][i]
        kl = comp["side_effects"]["wikitext-2"]
        gain = {
            a["base"]: a["change"][comp["task"]]["delta_ref_loglik_per_token"]
            for a in data["adapters"]
            if a["task"] == comp["task"]
        }
        want = (kl["treatment_kl_nats"] / gain["pit"]) / (kl["control_kl_nats"] / gain["tt"])
        assert math.isclose(C.measured(row.values[name], ROOT), want, rel_tol=1e-12)
        assert f"{row.values[name].text()}×" in row.fill(row.ours)


@pytest.mark.parametrize("claim", CLAIMS, ids=[f"{i + 1}" for i in range(len(CLAIMS))])
def test_the_papers_numbers_are_in_the_paper(claim):
    text = _paper_text(claim.paper)
    for number in C._DECIMAL.findall(claim.paper_number):
        assert number in text, f"{claim.where}: {number} is not in paper {claim.paper}"
    for ref in _refs(claim.where):
        assert _ref_exists(ref, text), f"{claim.where}: {ref} is not in paper {claim.paper}"


# ------------------------------------------------------------------ references in docs/

#: How docs/ name each paper, and the paper's file prefix.
_NAMES = {
    "001": r"PIT(?: paper)?",
    "004": r"(?:weight-tying-bias|bias)(?: paper)?",
}
_REF = r"(?:Tables?|Figures?|Appendix|§)\s?[0-9A-Z](?:[0-9.]*[0-9])?"
_REF_LIST = rf"{_REF}(?:(?:,\s*|\s+and\s+|\s*[–-]\s*|\s*\(|\s+)(?:its\s+)?(?:{_REF}|[0-9]+))*"


def _refs(text: str) -> list[str]:
    """`Table 2`, `Figures 3–4` (both), `§5.6`, `Appendix B` in `text`, one per item."""
    out: list[str] = []
    kind = None
    pattern = r"(Tables?|Figures?|Appendix|§)\s?([0-9A-Z](?:[0-9.]*[0-9])?)|(?<=[–-])([0-9]+)"
    for m in re.finditer(pattern, text):
        if m.group(1):
            kind = {"Tables": "Table", "Figures": "Figure"}.get(m.group(1), m.group(1))
            out.append(f"§{m.group(2)}" if kind == "§" else f"{kind} {m.group(2)}")
        elif kind in ("Table", "Figure") and out and out[-1].split()[-1].isdigit():
            lo = int(out[-1].split()[-1])
            out += [f"{kind} {k}" for k in range(lo + 1, int(m.group(3)) + 1)]
    return out


def _ref_exists(ref: str, text: str) -> bool:
    if ref.startswith("§"):
        num = ref[1:]
        return re.search(rf"(?m)^{re.escape(num)}\.? [A-Z]", text) is not None
    if ref.startswith("Appendix"):
        letter = ref.split()[1]
        return re.search(rf"(?m)^{re.escape(letter)}\.? [A-Z]", text) is not None
    return re.search(rf"\b{re.escape(ref)}\b", text) is not None


def _doc_references() -> list[tuple[str, int, str, str]]:
    """(file, line, paper, reference) for every reference in docs/ that names a paper right
    before it: "PIT paper, Table 1 and Figure 3", "weight-tying-bias Figure 4 (§5.3)",
    "the bias paper's §5.2"."""
    found = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for paper, name in _NAMES.items():
                pattern = rf"\b{name}(?:'s)?(?:,\s*|\s+|\s*\()(?:its\s+)?({_REF_LIST})"
                for m in re.finditer(pattern, line):
                    for ref in _refs(m.group(1)):
                        found.append((path.name, lineno, paper, ref))
    return found


def test_docs_name_papers_references_at_all():
    refs = _doc_references()
    assert len(refs) > 20
    assert {f for f, *_ in refs} >= {"results.md", "metrics.md", "experiment.md"}


@pytest.mark.parametrize(
    ("file", "line", "paper", "ref"),
    _doc_references(),
    ids=[f"{f}:{n}:{p}:{r}" for f, n, p, r in _doc_references()],
)
def test_every_paper_reference_in_docs_exists_in_that_paper(file, line, paper, ref):
    text = _paper_text(paper)
    assert _ref_exists(ref, text), f"docs/{file}:{line}: {ref} is not in paper {paper}"


def _section_body(section: str, text: str) -> str:
    """The lines of section `section` ("5.3") up to the next numbered heading, without the
    figure and table captions (which the papers' text places wherever the page put them)."""
    lines = text.splitlines()
    heading = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)*|[A-H](?:\.[0-9]+)*)\.? [A-Z]")
    start = next(
        (i for i, s in enumerate(lines) if re.match(rf"^{re.escape(section)}\.? [A-Z]", s)), None
    )
    if start is None:
        return ""
    body = []
    for s in lines[start + 1 :]:
        if heading.match(s):
            break
        if re.match(r"^(?:Figure|Table) [0-9]+[:.]", s):
            continue
        body.append(s)
    return "\n".join(body)


def _doc_pairs() -> list[tuple[str, int, str, str, str]]:
    """(file, line, paper, figure-or-table, section) where docs/ put a figure or table next to a
    section: "Figure 5, §5.3", "§3.1, Figure 2"."""
    pairs = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for paper, name in _NAMES.items():
                pattern = rf"\b{name}(?:'s)?(?:,\s*|\s+|\s*\()(?:its\s+)?({_REF_LIST})"
                for m in re.finditer(pattern, line):
                    refs = _refs(m.group(1))
                    for a, b in itertools.pairwise(refs):
                        item, sec = (a, b) if b.startswith("§") else (b, a)
                        if sec.startswith("§") and item.split()[0] in ("Figure", "Table"):
                            pairs.append((path.name, lineno, paper, item, sec[1:]))
    return pairs


@pytest.mark.parametrize(
    ("file", "line", "paper", "item", "section"),
    _doc_pairs(),
    ids=[f"{f}:{n}:{i}-{s}" for f, n, _, i, s in _doc_pairs()],
)
def test_a_figure_cited_with_a_section_is_discussed_in_that_section(
    file, line, paper, item, section
):
    """Catches swapped numbers: the weight-tying-bias paper's §5.3 discusses Figure 5 (its
    Figure 4 caption only lies inside §5.3's text)."""
    text = _paper_text(paper)
    assert re.search(rf"\b{item}\b", _section_body(section, text)), (
        f"docs/{file}:{line}: {item} is not discussed in §{section} of paper {paper}"
    )


def test_section_body_skips_captions():
    text = "5.2 Norms\nFigure 4 plots norms.\n5.3 Gradients\nFigure 4: caption.\nFigure 5 shows.\n"
    assert "Figure 4" in _section_body("5.2", text)
    body = _section_body("5.3", text)
    assert "Figure 5" in body and "Figure 4" not in body


def test_reference_parser_reads_lists_and_ranges():
    assert _refs("Table 1 and Figures 3–4") == ["Table 1", "Figure 3", "Figure 4"]
    assert _refs("Figure 5, §5.3") == ["Figure 5", "§5.3"]
    assert _refs("Table 1, Table 5 and Appendix B") == ["Table 1", "Table 5", "Appendix B"]


def test_reference_check_fails_on_a_missing_figure():
    text = "Figure 2: a caption.\n5.3 Output Gradients\n"
    assert _ref_exists("Figure 2", text)
    assert not _ref_exists("Figure 9", text)
    assert _ref_exists("§5.3", text)
    assert not _ref_exists("§5.6", text)


def _norm(text: str) -> str:
    return " ".join(text.replace("*", "").split())


def test_quotes_of_the_verdicts_are_the_papers_words():
    """Every quotation of four words or more in results.md's "Verdicts, row by row" and in the
    claims table is in one of the three papers' text."""
    texts = [_norm(_paper_text(p)) for p in ("001", "002", "004")]
    results = (ROOT / "docs" / "results.md").read_text()
    part = results[results.index("## Verdicts, row by row") :]
    part += "\n" + "\n".join(c.claim + " " + c.paper_number for c in CLAIMS)
    quotes = re.findall(r"[\"“]([^\"”\n]+(?:\n[^\"”\n]+)*)[\"”]", part)
    quotes = [_norm(q) for q in quotes if len(q.split()) >= 4]
    assert len(quotes) >= 5
    for q in quotes:
        assert any(q in t for t in texts), f"not in any paper: {q!r}"
