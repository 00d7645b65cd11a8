"""The tie proposer of docs/numbers.yaml (`python -m studies.numbers --tie`,
`studies.numbers_tie`): a tiny page and a tiny JSON file in tmp_path; what it ties, how it
writes the YAML, what it leaves and reports."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from studies import claims as C
from studies import numbers as N
from studies import numbers_tie as T

HEAD = "# a comment that stays\nR: &R docs/results/r.json\npages:\n"


def _repo(tmp_path, page: str, data: dict, budget: int, entry: str = "") -> None:
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "r.json").write_text(json.dumps(data))
    (tmp_path / "docs" / "a.md").write_text(page)
    (tmp_path / "docs" / "numbers.yaml").write_text(
        HEAD + f"  docs/a.md:\n{entry}    untied: {budget}\n  docs/b.md:\n    untied: 0\n"
    )


PAGE = (
    "# Results\n\n"
    "From `docs/results/r.json`. The val loss is 0.521. The share is 52.1 % of the tokens.\n"
    "We ran 8 runs. The kl is 0.777 nats.\n"
)
DATA = {"val_loss": 0.5214, "share": 0.5206, "runs": 8, "kl": 0.7, "other": [1, 2]}


def _spec(tmp_path) -> dict:
    return yaml.safe_load((tmp_path / "docs" / "numbers.yaml").read_text())["pages"]


def test_ties_by_decimals_and_percent_leaves_small_integers_and_reports_unmatched(tmp_path):
    _repo(tmp_path, PAGE, DATA, budget=4)
    (result,) = N.tie(tmp_path, ["docs/a.md"])
    entry = _spec(tmp_path)["docs/a.md"]
    assert entry["numbers"] == {
        "0.521": {"file": "docs/results/r.json", "path": "val_loss", "value": 0.521, "digits": 3},
        "52.1": {
            "file": "docs/results/r.json",
            "path": "share",
            "value": 52.1,
            "digits": 1,
            "scale": 100.0,
        },
    }
    # "8" is not tied (a small integer), "0.777" matches no leaf: two left, the budget says so
    assert entry["untied"] == 2 and (result.untied_before, result.untied_after) == (4, 2)
    assert [u["number"] for u in result.unmatched] == ["0.777"]
    assert result.unmatched[0]["significant_digits"] == 3 and result.unmatched[0]["line"] == 4
    assert [f.text for f in N.untied(tmp_path, "docs/a.md", entry)] == ["8", "0.777"]
    # every written entry passes the check of tests/docs/test_numbers.py
    for label, spec in entry["numbers"].items():
        v = C.Value(name=label, **spec)
        assert math.isclose(v.rounded(C.measured(v, tmp_path)), v.value)
        assert math.isclose(float(label), abs(v.value))


def test_the_yaml_keeps_comments_anchors_and_other_pages_and_a_rerun_changes_nothing(tmp_path):
    _repo(tmp_path, PAGE, DATA, budget=4)
    N.tie(tmp_path, ["docs/a.md"])
    text = (tmp_path / "docs" / "numbers.yaml").read_text()
    assert text.startswith(HEAD)
    assert '"0.521": {file: *R, path: val_loss, value: 0.521, digits: 3}' in text
    assert text.endswith("  docs/b.md:\n    untied: 0\n")
    (again,) = N.tie(tmp_path, ["docs/a.md"])
    assert again.ties == {} and (tmp_path / "docs" / "numbers.yaml").read_text() == text


def test_existing_entries_are_kept_and_not_proposed_again(tmp_path):
    entry = '    numbers:\n      "0.521": {file: *R, path: val_loss, value: 0.521, digits: 3}\n'
    _repo(tmp_path, PAGE, DATA, budget=3, entry=entry)
    (result,) = N.tie(tmp_path, ["docs/a.md"])
    assert list(result.ties) == ["52.1"]
    assert list(_spec(tmp_path)["docs/a.md"]["numbers"]) == ["0.521", "52.1"]


def test_scientific_notation_ties_by_significant_digits_and_k_by_thousands(tmp_path):
    page = "See `docs/results/r.json`: a kl of 9.6e-4 at 362k tokens/s.\n"
    _repo(tmp_path, page, {"kl": 0.000957, "tokens_per_s": 362104.0}, budget=2)
    (result,) = N.tie(tmp_path, ["docs/a.md"])
    numbers = _spec(tmp_path)["docs/a.md"]["numbers"]
    assert numbers["9.6e-4"] == {
        "file": "docs/results/r.json",
        "path": "kl",
        "value": 0.00096,
        "sig": 2,
    }
    assert numbers["362k"]["path"] == "tokens_per_s" and numbers["362k"]["scale"] == 0.001
    assert result.untied_after == 0


def test_the_rules_against_a_tie_to_another_quantity(tmp_path):
    """A series' items, a key naming another text, a two-digit number whose key says nothing,
    and two quantities that print alike are not tied."""
    page = "\n".join(
        [
            "Source: `docs/results/r.json`.",
            "",
            "| interface | KL WikiText-2 |",
            "|---|---:|",
            "| TT | 0.322 |",
            "",
            "The loss at one step was 4.275. The rate is 0.18 here.",
            "",
            "| run | gap |",
            "|---|---:|",
            "| a | 0.185 |",
        ]
    )
    data = {
        "kl": {"gutenberg": 0.3219},  # another text than the table's
        "curve": {"loss": [9.0, 8.0, 7.0, 6.0, 5.5, 5.0, 4.8, 4.5, 4.275, 4.1]},  # a series
        "accuracy_ci": 0.18,  # shares no word with "The rate is 0.18 here."
        "units": [{"gap_train": 0.1849}, {"gap_val": 0.1852}],  # two quantities, one print
    }
    _repo(tmp_path, page, data, budget=4)
    (result,) = N.tie(tmp_path, ["docs/a.md"], write=False)
    assert result.ties == {}
    assert sorted(result.no_word) == ["0.18", "0.322"]
    assert result.ambiguous == ["0.185"]
    assert [u["number"] for u in result.unmatched] == ["4.275"]


def test_cited_files_resolve_paths_relative_names_and_bare_names(tmp_path):
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    for f in ("docs/results/r.json", "benchmarks/results/b.json"):
        (tmp_path / f).write_text("{}")
    page = "[r](results/r.json), b.json, `missing.json`, docs/results/r.json again\n"
    (tmp_path / "docs" / "a.md").write_text(page)
    got = T.cited_files(tmp_path, "docs/a.md", page)
    assert [(c.file, c.lines) for c in got] == [
        ("docs/results/r.json", (1, 1)),
        ("benchmarks/results/b.json", (1,)),
    ]


@pytest.mark.parametrize(
    ("text", "informative"),
    [
        ("0.52", True),
        ("7.9", True),
        ("1,064,960", True),
        ("362k", True),
        ("9.6e-4", True),
        ("8", False),
        ("12", False),
        ("300", False),  # one significant digit
        ("0.1", False),
        ("1.000", False),
        ("0.000", False),
    ],
)
def test_which_numbers_carry_information(text, informative):
    assert T.informative(text) is informative


def test_leaves_use_the_path_syntax_of_claims_lookup():
    data = {"a": [{"b": 1.5}, {"b": 2}], "c/d": {"e": 3}, "flag": True, "s": "x"}
    got = dict(T.leaves(data))
    assert got == {"a/0/b": 1.5, "a/1/b": 2.0, "c/d/e": 3.0}
    assert all(C.lookup(data, path) == x for path, x in got.items())


def test_a_page_that_is_not_a_page_is_bad_input(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        N.main(["--root", str(tmp_path), "--tie", "nope.md"])
    assert e.value.code == 2
    assert "no page 'nope.md'" in capsys.readouterr().err
