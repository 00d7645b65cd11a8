"""Cosine kNN search and KNN@k overlap: known neighbours, naive agreement, tiling paths, errors."""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
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


@pytest.mark.parametrize("m", [1, 3, 7])
def test_tile_selection_breaks_ties_by_index(m: int) -> None:
    """Values on a coarse grid tie everywhere: the order is (value desc, index asc)."""
    S = torch.randint(0, 4, (96, 192), generator=torch.Generator().manual_seed(m)).float()
    for chunk in (1, 4, 8, 5):
        v, i = _top_rows(S, m, chunk)
        order = torch.from_numpy(np.argsort(-S.numpy(), axis=1, kind="stable")[:, :m])
        assert torch.equal(i, order)
        assert torch.equal(v, S.gather(1, order))
        v, i = _top_cols(S, m, chunk)
        order = torch.from_numpy(np.argsort(-S.T.numpy(), axis=1, kind="stable")[:, :m])
        assert torch.equal(i, order)


def _with_duplicates(V: int, d: int, seed: int) -> tuple[torch.Tensor, list[list[int]]]:
    """A low-rank matrix in which groups of rows are exact copies of one row (spread over the
    index range, as SmolLM2's 15 duplicated embedding rows are), plus one zero row."""
    X = _low_rank(V, d, seed)
    groups = [[3, 40, 41, 200, V - 1], [7, 8], [100, 150, 151, 152, 260, 261, 262]]
    for group in groups:
        X[group] = X[group[0]].clone()
    X[50] = 0.0
    return X, groups


@pytest.mark.parametrize(("block_size", "chunk"), [(8192, None), (64, 4), (100, 2), (37, 1)])
def test_ties_from_duplicated_rows_break_by_index(
    naive: ModuleType, block_size: int, chunk: int | None
) -> None:
    X, groups = _with_duplicates(300, 16, seed=13)
    k = 6  # the 7-row group forces ties at the boundary of every member's list
    got = knn_indices(X, k, block_size=block_size, chunk=chunk)
    assert torch.equal(got, torch.from_numpy(naive.knn_lists(naive.as64(X), k)))
    # A member's list starts with the other members of its group, lowest indices first.
    members = groups[2]
    for v in members:
        assert got[v].tolist() == [u for u in members if u != v][:k]
    # The zero row has cosine 0 with every row: its neighbours are the k lowest indices.
    assert got[50].tolist() == list(range(k))


def test_tie_breaking_is_the_same_in_both_matrices() -> None:
    """E and E·diag(g) share their duplicated rows; index tie-breaking picks the same copies in
    both, so the KNN@k overlap is invariant under a joint permutation of the rows."""
    X, _ = _with_duplicates(300, 16, seed=14)
    gain = torch.rand(16, generator=torch.Generator().manual_seed(15)) + 0.5
    Y = X * gain
    base = knn_overlap(X, Y, 6)
    for seed in range(3):
        perm = torch.randperm(300, generator=torch.Generator().manual_seed(seed))
        assert knn_overlap(X[perm], Y[perm], 6) == base
    # Run twice, same lists (deterministic), also with another tiling.
    assert torch.equal(knn_indices(X, 6), knn_indices(X, 6))
    assert torch.equal(knn_indices(X, 6), knn_indices(X, 6, block_size=64, chunk=4))


def test_lists_are_permutation_equivariant_without_ties() -> None:
    X = _low_rank(500, 16, seed=16)
    perm = torch.randperm(500, generator=torch.Generator().manual_seed(17))
    inverse = torch.argsort(perm)
    permuted = knn_indices(X[perm], 8, block_size=128)  # row i is token perm[i]
    assert torch.equal(perm[permuted][inverse], knn_indices(X, 8, block_size=128))


def test_prefix_of_a_longer_list_is_the_shorter_list() -> None:
    X, _ = _with_duplicates(300, 16, seed=18)
    assert torch.equal(knn_indices(X, 32)[:, :6], knn_indices(X, 6))


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


def test_duplicated_rows_tie_whatever_the_product_rounds(monkeypatch) -> None:
    """A many-core BLAS rounds one entry of a product differently by where the tiling puts it
    (a 16-core machine broke the test above that way). Simulated here: every tile product gets
    a relative last-bit perturbation that depends on the column's position in the tile. Copies of a row
    still tie exactly and break by index, the same for every tiling."""
    import tying.analysis.neighbors as neighbors

    exact = neighbors.tile_matmul

    def position_dependent(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        S = exact(a, b)  # a relative last-bit change: an exact 0 (the zero row) stays 0
        return S * (1 + 1.5e-7 * torch.arange(S.shape[1], dtype=S.dtype).sin())

    X, groups = _with_duplicates(300, 16, seed=14)
    reference = knn_indices(X, 6)  # exact products: index tie-breaking
    for group in groups:  # a row's copies come first, by index
        for row in group:
            others = [r for r in group if r != row][:6]
            assert reference[row, : len(others)].tolist() == others
    monkeypatch.setattr(neighbors, "tile_matmul", position_dependent)
    for block_size, chunk in [(8192, None), (64, 4), (37, 1)]:
        got = knn_indices(X, 6, block_size=block_size, chunk=chunk)
        assert torch.equal(got, reference), (block_size, chunk)
