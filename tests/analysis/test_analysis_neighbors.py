"""Cosine kNN search and KNN@k overlap: known neighbours, naive agreement, tiling paths, errors."""

from __future__ import annotations

import math
from types import ModuleType

import pytest
import torch

from tying.analysis import knn_indices, knn_overlap, neighbor_overlap
from tying.analysis.neighbors import _top_cols, _top_rows, tile_matmul


def _low_rank(V: int, d: int, seed: int, rank: int = 12, noise: float = 0.3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(V, rank, generator=g) @ torch.randn(
        rank, d, generator=g
    ) + noise * torch.randn(V, d, generator=g)


def _circle(V: int, d: int = 8, seed: int = 0) -> torch.Tensor:
    """V points evenly spaced on a circle, embedded in R^d by a random orthonormal pair of axes.

    The cosine neighbours of point v are v±1, v±2, ... (mod V), in that order.
    """
    theta = 2 * math.pi * torch.arange(V, dtype=torch.float64) / V
    g = torch.Generator().manual_seed(seed)
    axes, _ = torch.linalg.qr(torch.randn(d, 2, generator=g, dtype=torch.float64))
    return (torch.stack([theta.cos(), theta.sin()], dim=1) @ axes.T).to(torch.float32)


def _as_sets(idx: torch.Tensor) -> list[set[int]]:
    return [set(row) for row in idx.tolist()]


@pytest.mark.parametrize("m", [1, 3, 7])
def test_tile_selection_is_exact(m: int) -> None:
    S = torch.randn(128, 256, generator=torch.Generator().manual_seed(m))
    for chunk in (1, 4, 8, 5):  # 5 does not divide: plain topk path
        v, i = _top_rows(S, m, chunk)
        assert torch.equal(v, S.topk(m, dim=1).values)
        assert torch.equal(S.gather(1, i), v)
        v, i = _top_cols(S, m, chunk)
        assert torch.equal(v, S.topk(m, dim=0).values.T)
        assert torch.equal(S.T.gather(1, i), v)


def test_tile_matmul_is_float32_product() -> None:
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(70, 33, generator=g), torch.randn(90, 33, generator=g)
    assert torch.allclose(
        tile_matmul(a, b), (a.double() @ b.double().T).float(), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(("block_size", "chunk"), [(8192, None), (128, 4), (100, 2), (37, 1)])
def test_circle_neighbours_are_known(block_size: int, chunk: int | None) -> None:
    V, k = 360, 4
    idx = knn_indices(_circle(V), k, block_size=block_size, chunk=chunk)
    for v, nbrs in enumerate(_as_sets(idx)):
        assert nbrs == {(v + s) % V for s in (-2, -1, 1, 2)}
    # Sorted by decreasing cosine: the two nearest come first.
    assert all(set(row[:2]) == {(v - 1) % V, (v + 1) % V} for v, row in enumerate(idx.tolist()))


@pytest.mark.parametrize(
    ("k", "block_size", "chunk"), [(10, 8192, None), (10, 256, 4), (25, 300, 2)]
)
def test_agrees_with_naive_float64(
    naive: ModuleType, k: int, block_size: int, chunk: int | None
) -> None:
    X = _low_rank(1200, 48, seed=k)
    got = _as_sets(knn_indices(X, k, block_size=block_size, chunk=chunk))
    ref = naive.knn_sets(naive.as64(X), k)
    assert got == ref


def test_self_is_excluded_and_rows_are_distinct() -> None:
    idx = knn_indices(_low_rank(500, 16, seed=3), 12, block_size=64)
    assert not bool((idx == torch.arange(500).unsqueeze(1)).any())
    assert all(len(set(row)) == 12 for row in idx.tolist())


def test_overlap_invariances() -> None:
    X = _low_rank(800, 32, seed=4)
    Q, _ = torch.linalg.qr(torch.randn(32, 32, generator=torch.Generator().manual_seed(5)))
    scale = torch.rand(800, 1, generator=torch.Generator().manual_seed(6)) + 0.5
    assert knn_overlap(X, X) == 1.0
    assert knn_overlap(X, X @ Q) == pytest.approx(1.0, abs=2e-3)  # cosine is rotation invariant
    assert knn_overlap(X, X * scale) == pytest.approx(1.0, abs=2e-3)  # ...and row-scale invariant
    wide = torch.cat([X, torch.zeros(800, 5)], dim=1)  # different widths are fine
    assert knn_overlap(X, wide) == pytest.approx(1.0, abs=2e-3)


def test_overlap_of_unrelated_matrices_is_chance_level() -> None:
    k, V = 10, 1000
    score = knn_overlap(_low_rank(V, 32, seed=7), _low_rank(V, 32, seed=8), k)
    assert score < 10 * k / (V - 1)


def test_overlap_agrees_with_naive(naive: ModuleType) -> None:
    A = _low_rank(600, 24, seed=9)
    B = A + 0.6 * torch.randn(600, 24, generator=torch.Generator().manual_seed(10))
    got = knn_overlap(A, B, 10, block_size=128)
    assert got == pytest.approx(naive.knn_overlap(naive.as64(A), naive.as64(B), 10), abs=1e-12)
    assert 0.05 < got < 0.95


def test_neighbor_overlap_by_hand() -> None:
    a = torch.tensor([[1, 2, 3], [0, 2, 3]])
    b = torch.tensor([[3, 2, 0], [3, 1, 0]])
    # row 0 shares {2, 3}, row 1 shares {0, 3}: (2 + 2) / 6.
    assert neighbor_overlap(a, b) == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="neighbour lists"):
        neighbor_overlap(a, b[:, :2])


def test_zero_rows_do_not_produce_nan() -> None:
    X = _low_rank(200, 16, seed=11)
    X[5] = 0.0
    idx = knn_indices(X, 5)
    assert idx.shape == (200, 5) and int(idx.min()) >= 0


def test_rejects_bad_input() -> None:
    X = _low_rank(20, 8, seed=12)
    with pytest.raises(ValueError, match="more than k rows"):
        knn_indices(X, 20)
    with pytest.raises(ValueError, match="rows"):
        knn_overlap(X, X[:19])
    with pytest.raises(ValueError, match="k must be"):
        knn_indices(X, 0)
    bad = X.clone()
    bad[0, 0] = float("inf")
    with pytest.raises(ValueError, match="non-finite"):
        knn_indices(bad, 3)
