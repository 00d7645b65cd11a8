"""`run_probe --against` on tiny transformers folders: vocabulary matching and the pair metrics."""

from __future__ import annotations

import pytest
import torch

from tying.analysis import alignment, knn_overlap, spectral_distance
from tying.loader import load_any
from tying.probe import ProbeOptions, interface_matrices, run_probe
from tying.probe.compare import (
    MATRIX_NAMES,
    NamedMatrices,
    pair_label,
    pairs_of,
    paper_direction,
    vocab_match,
)

from .conftest import word_vocab


@pytest.fixture(scope="module")
def word_corpus(tmp_path_factory):
    """Lines of words w3..w109 with Zipf-like frequencies (a corpus for the word tokenizers)."""
    g = torch.Generator().manual_seed(0)
    ranks = torch.arange(3, 110, dtype=torch.float64)
    weights = 1.0 / (ranks - 2.0)
    lines = []
    for _ in range(200):
        ids = torch.multinomial(weights, 20, replacement=True, generator=g) + 3
        lines.append(" ".join(f"w{int(i)}" for i in ids))
    path = tmp_path_factory.mktemp("words") / "words.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def compared(llamas, word_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("probe-compare")
    options = ProbeOptions(
        str(llamas["tied"]), against=str(llamas["untied"]), corpus=str(word_corpus)
    )
    return run_probe(options, out)


def test_vocab_match_counts_shared_token_strings(compared) -> None:
    shared = set(word_vocab(96, 0)) & set(word_vocab(100, 10))
    assert compared.report["vocab_match"] == {
        "matched": len(shared),
        "vocab_a": 96,
        "vocab_b": 100,
        "by": "string",
    }
    assert len(shared) == 3 + (95 - 13 + 1)


#: The six pairs of A = tied (TT), B = untied, in the bias paper's direction (source, target):
#: untied onto tied ("Output (U) → Tied", "Input (U) → Tied"), input onto output.
PAPER_PAIRS = [
    ("A.input", "A.output"),
    ("B.input", "A.input"),
    ("B.output", "A.input"),
    ("B.input", "A.output"),
    ("B.output", "A.output"),
    ("B.input", "B.output"),
]


def test_comparison_blocks_have_every_pair(compared) -> None:
    report = compared.report
    assert report["errors"] == []
    assert report["against"]["tie"] == "untied" and report["model"]["tie"] == "tt"
    expected = PAPER_PAIRS
    assert {frozenset(p) for p in expected} == {
        frozenset((a, b)) for i, a in enumerate(MATRIX_NAMES) for b in MATRIX_NAMES[i + 1 :]
    }
    assert [(r["source"], r["target"]) for r in report["alignment"]["pairs"]] == expected
    labels = [r["label"] for r in report["alignment"]["pairs"]]
    assert labels[2] == "B.output (untied) → A.input (tt)"
    assert labels[5] == "B.input (untied) → B.output (untied)"
    assert report["alignment"]["identity_mode"] == "raw"
    assert report["spectral_distance"]["definition"] == "published"
    assert [(r["a"], r["b"]) for r in report["knn_overlap"]["pairs"]] == expected
    assert [(r["a"], r["b"]) for r in report["spectral_distance"]["pairs"]] == expected
    assert report["knn_overlap"]["k"] == 10
    assert (report["spectral_distance"]["k"], report["spectral_distance"]["n_components"]) == (
        64,
        128,
    )
    assert report["knn_overlap"]["n_tokens"] == report["vocab_match"]["matched"]


def _matched(llamas):
    a = interface_matrices(load_any(str(llamas["tied"])))
    b = interface_matrices(load_any(str(llamas["untied"])))
    idx_a, idx_b, _ = vocab_match(a, b)
    return a, b, idx_a, idx_b


def test_pair_values_equal_direct_calls(llamas, compared) -> None:
    a, b, idx_a, idx_b = _matched(llamas)
    # The matched rows are the same token strings.
    assert [a.tokens[i] for i in idx_a] == [b.tokens[j] for j in idx_b]
    A_in, B_in, B_out = a.E[idx_a], b.E[idx_b], b.U[idx_b]
    rows = {(r["a"], r["b"]): r for r in compared.report["knn_overlap"]["pairs"]}
    assert rows["B.output", "A.input"]["overlap"] == knn_overlap(A_in, B_out, k=10)
    assert rows["B.input", "B.output"]["overlap"] == knn_overlap(B_in, B_out, k=10)
    # The tied model's input and output are one matrix.
    assert rows["A.input", "A.output"]["overlap"] == 1.0
    same = rows["B.input", "A.input"]
    assert rows["B.input", "A.output"]["overlap"] == same["overlap"]
    spectral = {
        (r["a"], r["b"]): r["distance"] for r in compared.report["spectral_distance"]["pairs"]
    }
    assert spectral["A.input", "A.output"] == 0.0
    assert spectral["B.input", "A.input"] == pytest.approx(
        spectral_distance(A_in, B_in, k=64, n_components=128), rel=1e-9
    )
    align = {(r["source"], r["target"]): r for r in compared.report["alignment"]["pairs"]}
    direct = alignment(B_out, A_in)  # "Output (U) → Tied": the untied output is the source
    for key in ("identity", "orthogonal", "linear"):
        assert align["B.output", "A.input"][key] == pytest.approx(direct[key], rel=1e-12)
    # The direction changes the linear score (the fitted map is not symmetric).
    reverse = alignment(A_in, B_out)
    assert abs(reverse["linear"] - direct["linear"]) > 1e-3
    assert reverse["orthogonal"] == pytest.approx(direct["orthogonal"], rel=1e-9)


def test_effective_maps_and_cross_pairs(llamas, tmp_path) -> None:
    options = ProbeOptions(
        str(llamas["tied"]),
        against=str(llamas["untied"]),
        maps="effective",
        pairs="cross",
        skip=frozenset({"norm_frequency", "spectral", "plots"}),
    )
    report = run_probe(options, tmp_path).report
    assert "spectral_distance" not in report and report["skipped"]["spectral_distance"] == "--skip"
    pairs = [(r["a"], r["b"]) for r in report["knn_overlap"]["pairs"]]
    # Cross pairs only, each untied (B) matrix mapped onto a tied (A) one.
    assert pairs == [(b, a) for a, b in pairs_of("cross")]
    assert report["knn_overlap"]["maps"] == "effective"
    a, b, idx_a, idx_b = _matched(llamas)
    A_out_eff = (a.U * a.gain.float())[idx_a]  # tied: U diag(g) differs from E (s = 1)
    B_in = b.E[idx_b]
    rows = {(r["a"], r["b"]): r for r in report["knn_overlap"]["pairs"]}
    assert rows["B.input", "A.output"]["overlap"] == knn_overlap(A_out_eff, B_in, k=10)
    assert rows["B.input", "A.output"]["label"] == "B.input (untied) → A.output (tt)"


def test_models_without_tokenizers_match_by_id(tmp_path) -> None:
    from .conftest import llama_folder

    a = llama_folder(tmp_path / "a", vocab_size=80, tied=False, tokenizer=False)
    b = llama_folder(tmp_path / "b", vocab_size=80, tied=True, seed=3, tokenizer=False)
    options = ProbeOptions(str(a), against=str(b), skip=frozenset({"spectral", "plots"}))
    report = run_probe(options, tmp_path / "out").report
    assert report["vocab_match"] == {"matched": 80, "vocab_a": 80, "vocab_b": 80, "by": "id"}
    assert "no tokenizer" in report["skipped"]["norm_frequency"]
    c = llama_folder(tmp_path / "c", vocab_size=90, tied=True, tokenizer=False)
    report = run_probe(
        ProbeOptions(str(a), against=str(c), skip=frozenset({"plots"})), tmp_path / "o2"
    ).report
    assert "no tokenizer" in report["vocab_match"]["error"]
    assert report["errors"] == ["vocab_match"]


def _named(tie_a: str, tie_b: str, shared_a: bool = False) -> NamedMatrices:
    X = torch.zeros(3, 2)
    key = {"A.input": 0, "A.output": 0 if shared_a else 1, "B.input": 2, "B.output": 3}
    tie = {"A.input": tie_a, "A.output": tie_a, "B.input": tie_b, "B.output": tie_b}
    return NamedMatrices(dict.fromkeys(MATRIX_NAMES, X), key, tie)


def test_paper_direction_rules() -> None:
    pairs = pairs_of("all")
    # A untied, B a PIT model: untied onto tied, then input onto output.
    got = paper_direction(_named("untied", "pit"), pairs)
    assert got == [
        ("A.input", "A.output"),
        ("A.input", "B.input"),
        ("A.input", "B.output"),
        ("A.output", "B.input"),
        ("A.output", "B.output"),
        ("B.input", "B.output"),
    ]
    # Two untied models: input onto output; same side: A onto B.
    got = paper_direction(_named("untied", "untied"), pairs)
    assert got[3] == ("B.input", "A.output") and got[1] == ("A.input", "B.input")
    assert got[4] == ("A.output", "B.output")
    label = pair_label(_named("tt", "untied", shared_a=True), "B.output", "A.input")
    assert label == "B.output (untied) → A.input (tt)"


def test_probe_options_choose_the_definitions(llamas, tmp_path) -> None:
    options = ProbeOptions(
        str(llamas["tied"]),
        against=str(llamas["untied"]),
        pairs="cross",
        spectral_k=8,
        n_components=6,
        spectral_definition="union-frobenius",
        identity="centred",
        skip=frozenset({"norm_frequency", "knn", "plots", "consistency", "spectra"}),
    )
    report = run_probe(options, tmp_path).report
    a, b, idx_a, idx_b = _matched(llamas)
    A_in, B_in = a.E[idx_a], b.E[idx_b]
    row = report["spectral_distance"]["pairs"][0]
    assert (row["a"], row["b"]) == ("B.input", "A.input")
    assert report["spectral_distance"]["definition"] == "union-frobenius"
    ours = spectral_distance(A_in, B_in, 8, 6, definition="union-frobenius")
    assert row["distance"] == pytest.approx(ours, rel=1e-9)
    assert row["distance"] != pytest.approx(spectral_distance(A_in, B_in, 8, 6), rel=1e-3)
    align = report["alignment"]["pairs"][0]
    assert align["identity"] == pytest.approx(
        alignment(B_in, A_in, identity="centred")["identity"], rel=1e-12
    )
    assert report["alignment"]["identity_mode"] == "centred"
    with pytest.raises(ValueError, match="spectral_definition must be one of"):
        ProbeOptions("x", spectral_definition="frobenius")
    with pytest.raises(ValueError, match="identity must be one of"):
        ProbeOptions("x", identity="mean")
