"""`run_probe --against` on tiny transformers folders: vocabulary matching and the pair metrics."""

from __future__ import annotations

import pytest
import torch

from tying.analysis import alignment, knn_overlap, spectral_distance
from tying.loader import load_any
from tying.probe import ProbeOptions, interface_matrices, run_probe
from tying.probe.compare import MATRIX_NAMES, pairs_of, vocab_match

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


def test_comparison_blocks_have_every_pair(compared) -> None:
    report = compared.report
    assert report["errors"] == []
    assert report["against"]["tie"] == "untied" and report["model"]["tie"] == "tt"
    expected = [(a, b) for i, a in enumerate(MATRIX_NAMES) for b in MATRIX_NAMES[i + 1 :]]
    assert [(r["source"], r["target"]) for r in report["alignment"]["pairs"]] == expected
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
    assert rows["A.input", "B.output"]["overlap"] == knn_overlap(A_in, B_out, k=10)
    assert rows["B.input", "B.output"]["overlap"] == knn_overlap(B_in, B_out, k=10)
    # The tied model's input and output are one matrix.
    assert rows["A.input", "A.output"]["overlap"] == 1.0
    assert rows["A.output", "B.input"] == {**rows["A.input", "B.input"], "a": "A.output"}
    spectral = {
        (r["a"], r["b"]): r["distance"] for r in compared.report["spectral_distance"]["pairs"]
    }
    assert spectral["A.input", "A.output"] == 0.0
    assert spectral["A.input", "B.input"] == pytest.approx(
        spectral_distance(A_in, B_in, k=64, n_components=128), rel=1e-9
    )
    align = {(r["source"], r["target"]): r for r in compared.report["alignment"]["pairs"]}
    direct = alignment(A_in, B_out)
    for key in ("identity", "orthogonal", "linear"):
        assert align["A.input", "B.output"][key] == pytest.approx(direct[key], rel=1e-12)


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
    assert pairs == pairs_of("cross") and all(a[0] == "A" and b[0] == "B" for a, b in pairs)
    assert report["knn_overlap"]["maps"] == "effective"
    a, b, idx_a, idx_b = _matched(llamas)
    A_out_eff = (a.U * a.gain.float())[idx_a]  # tied: U diag(g) differs from E (s = 1)
    B_in = b.E[idx_b]
    rows = {(r["a"], r["b"]): r for r in report["knn_overlap"]["pairs"]}
    assert rows["A.output", "B.input"]["overlap"] == knn_overlap(A_out_eff, B_in, k=10)


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
