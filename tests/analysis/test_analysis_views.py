"""One-model views and helpers: vocabulary matching, parameter shares, norm/frequency, drift."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy import stats

from tying.analysis import (
    drift,
    match_vocabularies,
    norm_frequency,
    params_summary,
    row_cosine,
    token_counts,
)


def test_match_vocabularies() -> None:
    a = ["<s>", "the", "cat", None, "dog", "the"]
    b = ["dog", "bird", "the", "<s>", "the"]
    idx_a, idx_b, n = match_vocabularies(a, b)
    assert n == 3
    assert idx_a.tolist() == [0, 1, 4]  # "the" matched through its first id on both sides
    assert idx_b.tolist() == [3, 2, 0]
    assert [a[i] for i in idx_a.tolist()] == [b[j] for j in idx_b.tolist()]
    with pytest.raises(ValueError, match="token string"):
        match_vocabularies(["a", 3], ["a"])  # type: ignore[list-item]


def test_params_summary_smollm2_sizes() -> None:
    V, d = 49152, 576
    total = 134_515_008  # SmolLM2-135M, tied
    out = params_summary(total, V * d, vocab_size=V, d_model=d, tie="tt")
    assert out["non_embedding"] == total - V * d
    assert out["embedding_share"] == pytest.approx(V * d / total)
    assert out["tying_saves"] == V * d
    assert out["untied_total"] == total + V * d
    assert out["tying_potential_share"] == pytest.approx(V * d / (total + V * d))
    untied = params_summary(total + V * d, 2 * V * d, vocab_size=V, d_model=d, tie="untied")
    assert untied["tying_saves"] == 0
    assert untied["tying_potential_share"] == out["tying_potential_share"]
    json.dumps(out)
    with pytest.raises(ValueError, match="exceed"):
        params_summary(10, 20, vocab_size=2, d_model=5, tie="tt")
    with pytest.raises(ValueError, match="tie"):
        params_summary(10, 5, vocab_size=2, d_model=5, tie="tied")


def test_token_counts() -> None:
    rng = np.random.default_rng(0)
    chunks = [rng.integers(0, 50, size=n) for n in (100, 0, 37)]
    expected = np.bincount(np.concatenate(chunks), minlength=50)
    assert token_counts(chunks, 50).tolist() == expected.tolist()
    assert token_counts(torch.from_numpy(chunks[0]).view(10, 10), 50).sum() == 100
    with pytest.raises(ValueError, match="lie in"):
        token_counts(torch.tensor([0, 50]), 50)
    with pytest.raises(ValueError, match="integers"):
        token_counts(torch.tensor([0.5]), 50)


def test_norm_frequency() -> None:
    V = 300
    counts = torch.arange(V) * 3  # token 0 never seen
    directions = torch.nn.functional.normalize(
        torch.randn(V, 16, generator=torch.Generator().manual_seed(0)), dim=1
    )
    rising = directions * (1.0 + torch.arange(V, dtype=torch.float32)).unsqueeze(1)
    out = norm_frequency(rising, counts)
    assert out["spearman_rho"] == pytest.approx(1.0)
    assert out["n_tokens"] == V - 1
    assert norm_frequency(rising.flip(0), counts)["spearman_rho"] == pytest.approx(-1.0)
    json.dumps(out)
    noisy = torch.randn(V, 16, generator=torch.Generator().manual_seed(1))
    out = norm_frequency(noisy, counts, min_count=30, return_points=True)
    keep = counts >= 30
    ref = stats.spearmanr(noisy[keep].double().norm(dim=1).numpy(), counts[keep].numpy())
    assert out["spearman_rho"] == pytest.approx(float(ref.statistic))
    assert out["points"]["token_id"].tolist() == keep.nonzero().squeeze(1).tolist()
    with pytest.raises(ValueError, match="at least 3"):
        norm_frequency(noisy, torch.zeros(V, dtype=torch.int64))
    with pytest.raises(ValueError, match="one count per row"):
        norm_frequency(noisy, counts[:-1])


def test_drift() -> None:
    g = torch.Generator().manual_seed(2)
    X0 = torch.randn(100, 8, generator=g)
    X1 = X0.clone()
    X1[:50] *= -1  # half the rows flipped: cosine 0 on average to X0
    X2 = 3.0 * X1  # a rescale does not move any direction
    out = drift([X0, X1, X2])
    assert out["n_checkpoints"] == 3
    assert out["to_first"] == pytest.approx([1.0, 0.0, 0.0], abs=1e-12)
    assert out["to_previous"] == pytest.approx([0.0, 1.0], abs=1e-12)
    with pytest.raises(ValueError, match="shape"):
        drift([X0, X0[:, :4]])
    with pytest.raises(ValueError, match="at least one"):
        drift([])


def test_row_cosine_zero_rows() -> None:
    A = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    B = torch.tensor([[2.0, 0.0], [1.0, 1.0]])
    assert row_cosine(A, B).tolist() == [1.0, 0.0]
