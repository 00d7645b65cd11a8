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
from studies import numbers_defaults as D
from studies import numbers_tie as T

HEAD = "# a comment that stays\nR: &R docs/results/r.json\npages:\n"


def _repo(tmp_path, page: str, data: dict, entry: str = "") -> None:
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "r.json").write_text(json.dumps(data))
    (tmp_path / "docs" / "a.md").write_text(page)
    (tmp_path / "docs" / "numbers.yaml").write_text(
        HEAD + f"  docs/a.md:\n{entry}  docs/b.md:\n    allow: {{}}\n"
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
    _repo(tmp_path, PAGE, DATA)
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
    # "8" is not tied (a small integer), "0.777" matches no leaf: two left
    assert (result.untied_before, result.untied_after) == (4, 2)
    assert [u["number"] for u in result.unmatched] == ["0.777"]
    assert result.unmatched[0]["significant_digits"] == 3 and result.unmatched[0]["line"] == 4
    assert [f.text for f in N.untied(tmp_path, "docs/a.md", entry)] == ["8", "0.777"]
    # every written entry passes the check of tests/docs/test_numbers.py
    for label, spec in entry["numbers"].items():
        v = C.Value(name=label, **spec)
        assert math.isclose(v.rounded(C.measured(v, tmp_path)), v.value)
        assert math.isclose(float(label), abs(v.value))


def test_the_yaml_keeps_comments_anchors_and_other_pages_and_a_rerun_changes_nothing(tmp_path):
    _repo(tmp_path, PAGE, DATA)
    N.tie(tmp_path, ["docs/a.md"])
    text = (tmp_path / "docs" / "numbers.yaml").read_text()
    assert text.startswith(HEAD)
    assert '"0.521": {file: *R, path: val_loss, value: 0.521, digits: 3}' in text
    assert text.endswith("  docs/b.md:\n    allow: {}\n")
    (again,) = N.tie(tmp_path, ["docs/a.md"])
    assert again.ties == {} and (tmp_path / "docs" / "numbers.yaml").read_text() == text


def test_existing_entries_are_kept_and_not_proposed_again(tmp_path):
    entry = '    numbers:\n      "0.521": {file: *R, path: val_loss, value: 0.521, digits: 3}\n'
    _repo(tmp_path, PAGE, DATA, entry=entry)
    (result,) = N.tie(tmp_path, ["docs/a.md"])
    assert list(result.ties) == ["52.1"]
    assert list(_spec(tmp_path)["docs/a.md"]["numbers"]) == ["0.521", "52.1"]


def test_scientific_notation_ties_by_significant_digits_and_k_by_thousands(tmp_path):
    page = "See `docs/results/r.json`: a kl of 9.6e-4 at 362k tokens/s.\n"
    _repo(tmp_path, page, {"kl": 0.000957, "tokens_per_s": 362104.0})
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
    _repo(tmp_path, page, data)
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


# ---- the defaults mode (`--tie-defaults`, studies.numbers_defaults) ----

PRESET_D = "tying.decoder.presets.PRESETS.tiny.d_model"


def _defaults_repo(tmp_path, page: str) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(page)
    (tmp_path / "docs" / "numbers.yaml").write_text(
        HEAD + "  docs/a.md:\n  docs/b.md:\n    allow: {}\n"
    )


def test_a_number_in_a_sentence_naming_the_field_ties_to_the_preset_and_reruns_change_nothing(
    tmp_path,
):
    page = "# Model\n\nThe tiny preset has a d_model of 256 and 40 books.\n"
    _defaults_repo(tmp_path, page)
    (result,) = N.tie_defaults(tmp_path, ["docs/a.md"])
    assert result.ties == {"256": [PRESET_D]}
    assert (result.untied_before, result.untied_after) == (2, 1)
    text = (tmp_path / "docs" / "numbers.yaml").read_text()
    assert f'  docs/a.md:\n    defaults:\n      "256": {PRESET_D}\n  docs/b.md:' in text
    assert text.startswith(HEAD) and text.endswith("  docs/b.md:\n    allow: {}\n")
    entry = _spec(tmp_path)["docs/a.md"]
    assert N.code_default(entry["defaults"]["256"]) == 256  # the check of test_numbers.py
    assert [f.text for f in N.untied(tmp_path, "docs/a.md", entry)] == ["40"]
    (again,) = N.tie_defaults(tmp_path, ["docs/a.md"])
    assert again.ties == {} and (tmp_path / "docs" / "numbers.yaml").read_text() == text


def test_a_number_equal_to_a_default_in_a_sentence_naming_nothing_related_is_not_tied(tmp_path):
    page = "# Data\n\nWe read 256 books of the corpus.\n"
    _defaults_repo(tmp_path, page)
    (result,) = N.tie_defaults(tmp_path, ["docs/a.md"])
    assert result.ties == {} and result.value_only == ["256"]
    assert _spec(tmp_path)["docs/a.md"] is None  # nothing written


def test_every_field_of_the_value_that_the_sentence_names_equally_is_listed(tmp_path):
    """Without a preset's name, "d = 256" is the decoder's default width and tiny's."""
    page = "# Model\n\nThe width is d = 256 by default.\n"
    _defaults_repo(tmp_path, page)
    (result,) = N.tie_defaults(tmp_path, ["docs/a.md"], write=False)
    assert result.ties == {"256": ["tying.decoder.config.ModelConfig.d_model", PRESET_D]}


FAKE = """
import dataclasses

WARMUP_BLOCK = 4
PRESETS = {"small": {"width": 768}}
BUDGET = {"units": 3}

@dataclasses.dataclass
class TrainOptions:
    lr: float = 2e-3
    warmup_steps: int = 20
    n_layers: int = 4
    timeout_s: float = 30.0

@dataclasses.dataclass
class FitOptions:
    lr: float = 5e-4
    check_tokens: int = dataclasses.field(default=1024)
    tokens: int = 1024
    rank: int = 8
    names: list = dataclasses.field(default_factory=list)
"""


@pytest.fixture
def fake_defaults(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg_fake_defaults" / "options"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "knobs.py").write_text(FAKE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return D.collect("pkg_fake_defaults", ("pkg_fake_defaults.options",))


def test_collect_reads_fields_constants_and_dict_leaves_that_code_default_reads_back(
    fake_defaults,
):
    got = {d.name.removeprefix("pkg_fake_defaults.options.knobs."): d.value for d in fake_defaults}
    assert got == {
        "WARMUP_BLOCK": 4,
        "PRESETS.small.width": 768,
        "TrainOptions.lr": 2e-3,
        "TrainOptions.warmup_steps": 20,
        "TrainOptions.n_layers": 4,
        "TrainOptions.timeout_s": 30,
        "FitOptions.lr": 5e-4,
        "FitOptions.check_tokens": 1024,
        "FitOptions.tokens": 1024,
        "FitOptions.rank": 8,
    }  # BUDGET, a dict constant not in DICT_CONSTANTS, is not read
    for d in fake_defaults:
        assert N.code_default(d.name) == d.value
    common = {d.name.rsplit(".", 2)[-2]: d.common for d in fake_defaults if d.name.endswith(".lr")}
    assert common == {"TrainOptions": {"lr", "learning"}, "FitOptions": {"lr", "learning"}}


def _found(page: str, label: str) -> list[N.Found]:
    return [f for f in N.numbers(page) if f.text == label]


@pytest.mark.parametrize(
    ("sentence", "label", "names"),
    [
        # a field word in the number's clause: tied
        ("Training warms up for 20 warm-up steps.", "20", ["TrainOptions.warmup_steps"]),
        ("The training run uses lr 2e-3.", "2e-3", ["TrainOptions.lr"]),
        ("Each fit takes a check of 1,024 tokens.", "1,024", ["FitOptions.check_tokens"]),
        ("The model has 4 layers.", "4", ["TrainOptions.n_layers"]),
        # "lr" alone is a word of two dataclasses: the sentence (or heading) must name the one
        ("Adam with lr 2e-3 here.", "2e-3", None),
        ("Each fit runs Adam with lr 5e-4.", "5e-4", ["FitOptions.lr"]),
        # ... in the number's own clause: a dataclass named elsewhere may be another step
        ("Training ends (then Adam with lr 2e-3 runs).", "2e-3", None),
        # a unit the field's name does not hold: seconds, not steps
        ("The cache is warm-up after 20 s.", "20", None),
        # "layer 4" is a position, not a count of layers
        ("The module sits at layer 4 of the stack.", "4", None),
        # the field's word belongs to another number of the clause
        ("The lr is 2e-3 at first, and after 20 steps it decays.", "20", None),
        # a dict leaf of a named row
        ("The small preset's width is 768.", "768", ["PRESETS.small.width"]),
        ("The tiny preset's width is 768.", "768", None),  # another preset's leaf
        # a field whose whole name is a generic word ("tokens") is not named by it
        ("It reads 1,024 tokens a step.", "1,024", None),
        # "rank" names other things too: the dataclass must be named
        ("The GPU run used 8 ranks.", "8", None),
        ("Each fit uses rank 8.", "8", ["FitOptions.rank"]),
    ],
)
def test_the_words_of_the_clause_decide(fake_defaults, sentence, label, names):
    page = f"# Setup\n\n{sentence}\n"  # the heading names no dataclass
    (result,) = [D.propose("docs/a.md", page, _found(page, label), fake_defaults)]
    prefix = "pkg_fake_defaults.options.knobs."
    expected = {label: [prefix + n for n in names]} if names else {}
    assert result.ties == expected, result


def test_a_number_is_tied_only_where_every_occurrence_names_a_field(fake_defaults):
    page = "# Training\n\nThe model has 4 layers.\n\nWe ran 4 seeds of it.\n"
    (result,) = [D.propose("docs/a.md", page, _found(page, "4"), fake_defaults)]
    assert result.ties == {} and result.partly == ["4"]


def test_field_words_keep_plurals_and_drop_generic_parts():
    assert D.field_words("n_layers") == {"n_layers", "layers", "l", "depth"}
    assert D.field_words("global_batch_tokens") == {"global_batch_tokens", "global", "batch"}
    assert "layer" not in D.field_words("n_layers")
    assert D.sentence_words("a warm-up of 4 layers") >= {"warmup", "layers", "layer"}


def test_a_page_that_is_not_a_page_is_bad_input_for_tie_defaults(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        N.main(["--root", str(tmp_path), "--tie-defaults", "nope.md"])
    assert e.value.code == 2
    assert "--tie-defaults: no page 'nope.md'" in capsys.readouterr().err
