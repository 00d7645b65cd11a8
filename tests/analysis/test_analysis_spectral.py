"""kNN graphs, the omnibus embedding and the spectral distance."""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
import pytest
import torch

from tying.analysis import (
    knn_graph,
    knn_indices,
    omnibus_distance,
    omnibus_embedding,
    omnibus_matrix,
    spectral_distance,
)


def _circle(V: int, d: int = 6) -> torch.Tensor:
    theta = 2 * math.pi * torch.arange(V, dtype=torch.float64) / V
    axes, _ = torch.linalg.qr(
        torch.randn(d, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    )
    return (torch.stack([theta.cos(), theta.sin()], dim=1) @ axes.T).float()


def _low_rank(V: int, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(V, 8, generator=g) @ torch.randn(8, d, generator=g) + 0.3 * torch.randn(
        V, d, generator=g
    )


def test_knn_graph_weights_by_hand() -> None:
    # Mutual pairs 0-1, 0-2, 2-3 get weight 1; one-way 1 -> 2 and 3 -> 1 get 1/2.
    idx = torch.tensor([[1, 2], [0, 2], [3, 0], [2, 1]])
    half = knn_graph(idx).toarray()
    expected = np.array(
        [
            [0.0, 1.0, 1.0, 0.0],  # 0-2: 0 lists 2 and 2 lists 0
            [1.0, 0.0, 0.5, 0.5],  # 1-2: only 1 lists 2; 1-3: only 3 lists 1
            [1.0, 0.5, 0.0, 1.0],
            [0.0, 0.5, 1.0, 0.0],
        ],
        dtype=np.float32,
    )
    assert np.array_equal(half, expected)
    binary = knn_graph(idx, weights="binary").toarray()
    assert np.array_equal(binary, (expected > 0).astype(np.float32))
    # A self entry is dropped, not counted.
    assert not knn_graph(torch.tensor([[0, 1], [0, 1]])).toarray().diagonal().any()
    with pytest.raises(ValueError, match="lie in"):
        knn_graph(torch.tensor([[1], [5]]))
    with pytest.raises(ValueError, match="weights must be one of"):
        knn_graph(idx, weights="union")


def test_omnibus_distance_norms_by_hand() -> None:
    # Z_A = diag(3, 1), Z_B = diag(1, 1): Z_A − Z_B = diag(2, 0).
    Z = torch.tensor([[3.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    assert omnibus_distance(Z) == pytest.approx(2.0 / 1.0, rel=1e-15)  # spectral: 2 / min(3, 1)
    frob = omnibus_distance(Z, "frobenius")
    assert frob == pytest.approx(2.0 / math.sqrt(2.0), rel=1e-15)  # 2 / min(√10, √2)
    with pytest.raises(ValueError, match="norm must be one of"):
        omnibus_distance(Z, "nuclear")


def test_circle_graph_is_the_cycle_and_its_spectrum_is_known() -> None:
    V = 200
    G = knn_graph(knn_indices(_circle(V), 2))
    cycle = np.zeros((V, V))
    for v in range(V):
        cycle[v, (v + 1) % V] = cycle[v, (v - 1) % V] = 1.0
    assert np.array_equal(G.toarray(), cycle)
    # Omnibus of a graph with itself: [[C, C], [C, C]] has eigenvalues 2·λ(C) = 4 cos(2πj/V) and 0.
    n = 12
    for method in ("dense", "arpack"):
        Z, lam = omnibus_embedding(G, G, n, method=method, dtype=torch.float64)
        expected = np.sort(np.abs(4 * np.cos(2 * np.pi * np.arange(V) / V)))[::-1][:n]
        assert np.allclose(np.abs(lam.numpy()), expected, atol=1e-9)
        assert omnibus_distance(Z) == pytest.approx(0.0, abs=1e-9)


def test_arpack_float32_float64_and_dense_agree() -> None:
    A = _low_rank(700, 16, 1)
    B = A + 0.8 * torch.randn(700, 16, generator=torch.Generator().manual_seed(2))
    ga, gb = knn_graph(knn_indices(A, 8)), knn_graph(knn_indices(B, 8))
    ref = omnibus_distance(omnibus_embedding(ga, gb, 24, method="dense")[0])
    d64 = omnibus_distance(omnibus_embedding(ga, gb, 24, method="arpack", dtype=torch.float64)[0])
    d32 = omnibus_distance(omnibus_embedding(ga, gb, 24, method="arpack", dtype=torch.float32)[0])
    assert d64 == pytest.approx(ref, rel=1e-8)
    assert d32 == pytest.approx(ref, rel=1e-4)
    assert ref > 0.05


def test_operator_matches_the_formed_omnibus_matrix() -> None:
    from tying.analysis.spectral import _omnibus_operator

    ga = knn_graph(knn_indices(_low_rank(150, 8, 3), 5))
    gb = knn_graph(knn_indices(_low_rank(150, 8, 4), 5))
    x = np.random.default_rng(0).standard_normal(300)
    op = _omnibus_operator(ga, gb, torch.float64)
    assert np.allclose(op.matvec(x), omnibus_matrix(ga, gb) @ x, atol=1e-12)


@pytest.mark.parametrize("definition", ["published", "union-frobenius"])
def test_spectral_distance_agrees_with_naive(naive: ModuleType, definition: str) -> None:
    A = _low_rank(240, 12, 5)
    B = A + 0.7 * torch.randn(240, 12, generator=torch.Generator().manual_seed(6))
    ref = naive.spectral_distance(naive.as64(A), naive.as64(B), 6, 16, definition)
    for method in ("dense", "arpack"):
        got = spectral_distance(A, B, k=6, n_components=16, definition=definition, method=method)
        assert got == pytest.approx(ref, rel=1e-4)
    dense64 = spectral_distance(A, B, 6, 16, definition=definition, method="dense")
    assert dense64 == pytest.approx(ref, rel=1e-10)


def test_the_two_definitions_differ(naive: ModuleType) -> None:
    """Same graphs and eigensolver, different weights and norm: different numbers (the naive
    float64 formulas agree on which is which)."""
    A = _low_rank(300, 10, 12)
    B = A + 0.5 * torch.randn(300, 10, generator=torch.Generator().manual_seed(13))
    pub = spectral_distance(A, B, 8, 20, method="dense")
    ours = spectral_distance(A, B, 8, 20, definition="union-frobenius", method="dense")
    assert abs(pub - ours) > 0.01
    a64, b64 = naive.as64(A), naive.as64(B)
    assert pub == pytest.approx(naive.spectral_distance(a64, b64, 8, 20), rel=1e-10)
    assert ours == pytest.approx(
        naive.spectral_distance(a64, b64, 8, 20, "union-frobenius"), rel=1e-10
    )
    with pytest.raises(ValueError, match="unknown spectral distance definition"):
        spectral_distance(A, B, 8, 20, definition="frobenius")


def test_spectral_distance_properties() -> None:
    A = _low_rank(400, 12, 7)
    B = _low_rank(400, 12, 8)
    Q, _ = torch.linalg.qr(torch.randn(12, 12, generator=torch.Generator().manual_seed(9)))
    assert spectral_distance(A, A @ Q, k=6, n_components=16) == pytest.approx(0.0, abs=1e-9)
    ab = spectral_distance(A, B, k=6, n_components=16)
    assert ab == pytest.approx(spectral_distance(B, A, k=6, n_components=16), rel=1e-9)  # symmetric
    near = spectral_distance(
        A, A + 0.2 * torch.randn(400, 12, generator=torch.Generator().manual_seed(10)), 6, 16
    )
    assert 0.0 < near < ab


def test_rejects_bad_input() -> None:
    A = _low_rank(30, 4, 11)
    with pytest.raises(ValueError, match="rows"):
        spectral_distance(A, A[:29], k=3, n_components=4)
    with pytest.raises(ValueError, match="n_components"):
        spectral_distance(A, A, k=3, n_components=59)
    ga = knn_graph(knn_indices(A, 3))
    with pytest.raises(ValueError, match="same size"):
        omnibus_embedding(ga, knn_graph(knn_indices(A[:20], 3)), 4)
