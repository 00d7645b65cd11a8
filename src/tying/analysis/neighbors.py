"""Cosine k-nearest neighbours of the rows of a matrix, and the KNN@k overlap of two matrices.

Definitions (bias paper, §4.1):

    N_k(X, v)        the k rows u ≠ v of X with the largest cosine cos(X[u], X[v])
                     (self excluded; ties broken arbitrarily)
    KNN@k(A, B)      mean_v |N_k(A, v) ∩ N_k(B, v)| / k      (unitless fraction in [0, 1])

A row whose norm is zero has cosine 0 with every row.

How it is computed (exactly, in float32, fast on CPU):

- rows are normalized in float32; the V×V similarity matrix is never held:
  it is formed in square tiles of `block_size` rows, and only the tiles on
  and above the diagonal (S is symmetric), each tile serving both its rows and
  its columns, which halves the matrix-product work;
- the tile products run through oneDNN's float32 matmul where torch provides it
  (about twice as fast as the default CPU BLAS on AVX-512 machines, same IEEE
  float32 arithmetic; checked against `torch.mm` once per process), else
  `torch.mm`;
- each tile is reduced to the best k entries per row and per column by an exact
  chunk-maximum prefilter: the maxima of `chunk`-element slices are taken first,
  and only the k slices with the largest maxima can hold the top k, so only they
  are searched; the result is merged into a running top-k per row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from tying.analysis._validate import check_matrix, check_positive_int, check_same_rows

#: Rows per tile of the similarity matrix.
DEFAULT_BLOCK_SIZE = 8192

#: Slice length of the chunk-maximum prefilter (None: 16 for k <= 16, else 8).
DEFAULT_CHUNK: int | None = None


def normalize_rows(X: Tensor) -> Tensor:
    """Rows scaled to unit Euclidean norm, float32 (zero rows stay zero).

    Args:
        X: (V, d) floating point.

    Returns:
        (V, d) float32 on X's device.
    """
    Xf = X.detach().to(torch.float32)
    norms = Xf.norm(dim=1, keepdim=True)
    return Xf / norms.clamp_min(torch.finfo(torch.float32).tiny)


_ONEDNN_OK: bool | None = None


def _onednn_available() -> bool:
    """Whether oneDNN's float32 matmul is usable here and agrees with torch.mm (checked once)."""
    global _ONEDNN_OK
    if _ONEDNN_OK is None:
        ok = False
        try:
            if torch.backends.mkldnn.is_available():
                gen = torch.Generator().manual_seed(0)
                a = torch.randn(64, 48, generator=gen)
                b = torch.randn(80, 48, generator=gen)
                out = torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")
                ok = out.dtype == torch.float32 and bool(
                    torch.allclose(out, a @ b.T, rtol=1e-5, atol=1e-4)
                )
        except (AttributeError, RuntimeError, TypeError):
            ok = False
        _ONEDNN_OK = ok
    return _ONEDNN_OK


def _ieee_fp32_mode() -> bool:
    """False when the user asked oneDNN for reduced-precision float32 matmuls (bf16 or tf32)."""
    precision = getattr(getattr(torch.backends.mkldnn, "matmul", None), "fp32_precision", "none")
    return precision in ("none", "ieee")


def tile_matmul(a: Tensor, b: Tensor) -> Tensor:
    """a @ b.T in IEEE float32: oneDNN on CPU where available (faster), else torch.mm.

    Args:
        a: (r, d) float32.
        b: (n, d) float32.

    Returns:
        (r, n) float32, contiguous.
    """
    if (
        a.device.type == "cpu"
        and a.dtype == torch.float32
        and _ieee_fp32_mode()
        and _onednn_available()
    ):
        return torch.ops.mkldnn._linear_pointwise(
            a.contiguous(), b.contiguous(), None, "none", [], ""
        )
    return a @ b.T


@dataclass(frozen=True)
class _Plan:
    block: int
    chunk: int


def _top_rows(S: Tensor, m: int, chunk: int) -> tuple[Tensor, Tensor]:
    """Top-m entries of each row of a tile: values (float32, sorted descending) and column indices.

    Exact (the same multiset of values as `S.topk(m, dim=1)`), via a chunk-maximum prefilter:
    columns are split into `chunk`-element interleaved slices {q, q + n/chunk, ...}; a row's
    top m lie in the m slices with the largest maxima.
    """
    r, n = S.shape
    m_eff = min(m, n)
    if n % chunk != 0 or n // chunk <= 2 * m:
        v, i = S.topk(m_eff, dim=1)
        return v.float(), i
    nch = n // chunk
    S3 = S.view(r, chunk, nch)  # S3[i, t, q] = S[i, t·nch + q]
    slices = S3.amax(dim=1).topk(m, dim=1, sorted=False).indices  # (r, m)
    cand = torch.gather(S3, 2, slices.unsqueeze(1).expand(r, chunk, m))  # (r, chunk, m)
    v, p = cand.reshape(r, chunk * m).topk(m, dim=1)
    cols = slices.gather(1, p % m) + (p // m) * nch
    return v.float(), cols


def _top_cols(S: Tensor, m: int, chunk: int) -> tuple[Tensor, Tensor]:
    """Top-m entries of each column of a tile, as (n, m) values (float32, descending) and row indices."""
    r, n = S.shape
    m_eff = min(m, r)
    if r % chunk != 0 or r // chunk <= 2 * m:
        v, i = S.topk(m_eff, dim=0)
        return v.T.float(), i.T
    nch = r // chunk
    S3 = S.view(nch, chunk, n)  # S3[q, t, j] = S[q·chunk + t, j]
    slices = S3.amax(dim=1).T.topk(m, dim=1, sorted=False).indices  # (n, m)
    cand = torch.gather(S3, 0, slices.T.unsqueeze(1).expand(m, chunk, n))  # (m, chunk, n)
    v, p = cand.reshape(m * chunk, n).T.topk(m, dim=1)  # (n, m); p = s·chunk + t
    rows = slices.gather(1, p // chunk) * chunk + p % chunk
    return v.float(), rows


def _merge(vals: Tensor, idx: Tensor, lo: int, hi: int, new_v: Tensor, new_i: Tensor) -> None:
    """Merge candidates (new_v, new_i) of rows lo:hi into the running top-m (vals, idx) in place."""
    m = vals.shape[1]
    cat_v = torch.cat([vals[lo:hi], new_v], dim=1)
    cat_i = torch.cat([idx[lo:hi], new_i], dim=1)
    top_v, pos = cat_v.topk(m, dim=1)
    vals[lo:hi] = top_v
    idx[lo:hi] = cat_i.gather(1, pos)


def _tile(
    Y: Tensor, state: tuple[Tensor, Tensor], i0: int, i1: int, j0: int, j1: int, plan: _Plan
) -> None:
    """Fold the similarities of rows i0:i1 with rows j0:j1 (j0 >= i1, or the same range) into state.

    A diagonal tile (i0 == j0) larger than a quarter block is split into its upper-triangular
    sub-tiles, so that little of the symmetric product is computed twice.
    """
    vals, idx = state
    m = vals.shape[1]
    if i0 == j0 and (i1 - i0) > max(plan.block // 4, 2 * m + 2):
        mid = (i0 + i1) // 2
        _tile(Y, state, i0, mid, i0, mid, plan)
        _tile(Y, state, i0, mid, mid, i1, plan)
        _tile(Y, state, mid, i1, mid, i1, plan)
        return
    S = tile_matmul(Y[i0:i1], Y[j0:j1])
    if i0 == j0:
        S.fill_diagonal_(-math.inf)
    v, c = _top_rows(S, m, plan.chunk)
    _merge(vals, idx, i0, i1, v, c + j0)
    if i0 != j0:
        v, r = _top_cols(S, m, plan.chunk)
        _merge(vals, idx, j0, j1, v, r + i0)


def _top_m_all(Y: Tensor, m: int, plan: _Plan) -> tuple[Tensor, Tensor]:
    """Top-m (by Y Y^T, self excluded) of every row of Y.

    Returns:
        vals (V, m) float32 sorted descending (-inf where fewer than m other rows exist),
        idx (V, m) int64 (-1 where vals is -inf).
    """
    V = Y.shape[0]
    vals = torch.full((V, m), -math.inf, dtype=torch.float32, device=Y.device)
    idx = torch.full((V, m), -1, dtype=torch.int64, device=Y.device)
    starts = list(range(0, V, plan.block))
    for a, i0 in enumerate(starts):
        i1 = min(i0 + plan.block, V)
        for j0 in starts[a:]:
            _tile(Y, (vals, idx), i0, i1, j0, min(j0 + plan.block, V), plan)
    idx[vals == -math.inf] = -1
    return vals, idx


def knn_indices(
    X: Tensor,
    k: int = 10,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    chunk: int | None = DEFAULT_CHUNK,
) -> Tensor:
    """The k nearest rows of every row of X by cosine similarity, self excluded (float32).

    Args:
        X: (V, d) floating point, finite, V > k.
        k: neighbours per row.
        block_size: rows per tile (memory: about two block_size² float32 tiles).
        chunk: slice length of the prefilter (a speed knob; every value gives the same result;
            None picks 16 for k <= 16, else 8).

    Returns:
        (V, k) int64: row v lists its neighbours by decreasing cosine (ties broken arbitrarily).

    Raises:
        ValueError: X is not a finite matrix, V <= k, or an argument is out of range.
    """
    check_matrix(X, "the matrix X")
    check_positive_int(k, "k")
    check_positive_int(block_size, "block_size", minimum=2)
    if chunk is None:
        chunk = 16 if k <= 16 else 8
    check_positive_int(chunk, "chunk")
    V = X.shape[0]
    if V <= k:
        raise ValueError(f"k={k} neighbours need more than k rows, got V={V}; use a smaller k")
    _, idx = _top_m_all(normalize_rows(X), k, _Plan(block=block_size, chunk=chunk))
    return idx


def neighbor_overlap(idx_a: Tensor, idx_b: Tensor) -> float:
    """mean_v |N_a(v) ∩ N_b(v)| / k for two (V, k) neighbour lists (unitless, in [0, 1])."""
    if idx_a.shape != idx_b.shape or idx_a.dim() != 2:
        raise ValueError(
            f"neighbour lists must both be (V, k), got {tuple(idx_a.shape)} and {tuple(idx_b.shape)}"
        )
    V, k = idx_a.shape
    rows = torch.arange(V, device=idx_a.device).unsqueeze(1) * (
        int(max(idx_a.max(), idx_b.max())) + 1
    )
    shared = torch.isin(rows + idx_a, rows + idx_b)
    return float(shared.sum()) / (V * k)


def knn_overlap(A: Tensor, B: Tensor, k: int = 10, **knn_options: object) -> float:
    """KNN@k: mean over tokens of the fraction of k cosine neighbours A and B share.

    KNN@k(A, B) = mean_v |N_k(A, v) ∩ N_k(B, v)| / k, with N_k the k rows of largest cosine
    similarity, self excluded (bias paper, §4.1). Unitless, in [0, 1]; about k / (V - 1)
    for unrelated matrices.

    Args:
        A: (V, d_a), one row per token.
        B: (V, d_b), the same tokens in the same order (d_b may differ from d_a).
        k: neighbours per token.
        **knn_options: passed to `knn_indices` (block_size, chunk).

    Raises:
        ValueError: different numbers of rows, V <= k, or non-finite input.
    """
    check_matrix(A, "the matrix A")
    check_matrix(B, "the matrix B")
    check_same_rows(A, B, "A", "B")
    return neighbor_overlap(knn_indices(A, k, **knn_options), knn_indices(B, k, **knn_options))
