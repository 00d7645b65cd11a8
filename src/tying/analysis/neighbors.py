"""Cosine k-nearest neighbours of the rows of a matrix, and the KNN@k overlap of two matrices.

Definitions (bias paper, §4.1):

    N_k(X, v)        the first k rows u ≠ v of X in the order (cos(X[u], X[v]) descending,
                     u ascending): the k largest cosines, exact ties broken by token index
                     (the lower index first), so the lists are deterministic
    KNN@k(A, B)      mean_v |N_k(A, v) ∩ N_k(B, v)| / k      (unitless fraction in [0, 1])

A row whose norm is zero has cosine 0 with every row. Ties are exact ties of the float32
cosines as computed (duplicated rows give them: a row duplicated r times ties r ways in every
list). Breaking them by index makes the lists of two matrices with the same duplicated rows
(e.g. E and E·diag(g)) agree on them, and makes the first k' columns of a KNN@k list (k' < k)
the KNN@k' list.

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
  are searched; the result is merged into a running top-k per row;
- ties are settled by one int64 key per entry, (the float32 value's order-preserving bits
  << 32) | (2^32 − 1 − index): the order (value descending, index ascending) with no two
  keys equal. Each selection takes the m + 1 largest values: where the m-th and (m+1)-th
  differ the set is unique and only its m keys are sorted; rows tied there are ranked by key
  over all their candidates (`_rank`). The prefilter stays exact under ties: a row (or
  column) whose m-th and (m+1)-th largest slice maxima are equal, which only exact ties
  produce, is searched whole instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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


def onednn_available() -> bool:
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
        and onednn_available()
    ):
        return torch.ops.mkldnn._linear_pointwise(
            a.contiguous(), b.contiguous(), None, "none", [], ""
        )
    return a @ b.T


@dataclass(frozen=True)
class _Plan:
    block: int
    chunk: int


_LOW = 0xFFFFFFFF  # 2^32 − 1: the low 32 bits of a key hold _LOW − index


def _order_keys(values: Tensor, index: Tensor) -> Tensor:
    """int64 keys ordered as (value descending, index ascending); all distinct for distinct index.

    Args:
        values: float32, any shape (−0.0 counts as +0.0; no NaN).
        index: int64 in [0, 2^32), broadcastable to values.

    Returns:
        int64 of values' broadcast shape: (b(value) << 32) | (2^32 − 1 − index), with b the
        float's bits mapped to a signed int32 of the same order.
    """
    bits = (values.to(torch.float32) + 0.0).view(torch.int32)  # + 0.0 turns −0.0 into +0.0
    ordered = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(torch.int64)
    return (ordered << 32) | (_LOW - index)


def _decode_keys(keys: Tensor) -> tuple[Tensor, Tensor]:
    """(values float32, index int64) of keys made by `_order_keys`."""
    ordered = (keys >> 32).to(torch.int32)
    values = (ordered ^ ((ordered >> 31) & 0x7FFFFFFF)).view(torch.float32)
    return values, _LOW - (keys & _LOW)


def _rank(vals: Tensor, m: int, index: Callable[[Tensor, Tensor | None], Tensor]) -> Tensor:
    """Keys of the first min(m, C) candidates of each row in (value desc, index asc) order.

    Args:
        vals: (R, C) float32 candidate values.
        m: entries wanted per row.
        index: index(pos, rows) -> the token indices of candidate positions `pos` (int64, same
            shape) of the rows `rows` (None: all R rows, in order).

    `topk(m + 1)` on the values settles every row whose m-th and (m+1)-th values differ (its
    top-m set is then unique; only those m keys are sorted); rows tied at that boundary are
    ranked by key over all their candidates.
    """
    R, C = vals.shape
    if C <= m:
        pos = torch.arange(C, device=vals.device).expand(R, C)
        return _order_keys(vals, index(pos, None)).sort(dim=1, descending=True).values
    v, p = vals.topk(m + 1, dim=1)
    keys = _order_keys(v[:, :m], index(p[:, :m], None)).sort(dim=1, descending=True).values
    tied = (v[:, m - 1] == v[:, m]).nonzero().flatten()
    if tied.numel():
        pos = torch.arange(C, device=vals.device).expand(tied.numel(), C)
        keys[tied] = _order_keys(vals[tied], index(pos, tied)).topk(m, dim=1).values
    return keys


def _top_exact(S: Tensor, m: int) -> tuple[Tensor, Tensor]:
    """Top-m entries of each row of S (r, n) in (value desc, column asc) order: values, columns."""
    return _decode_keys(_rank(S, m, lambda pos, rows: pos))


def _top_rows(S: Tensor, m: int, chunk: int) -> tuple[Tensor, Tensor]:
    """Top-m entries of each row of a tile in (value desc, column asc) order: values and columns.

    Exact (the first m entries of each row in that order), via a chunk-maximum prefilter:
    columns are split into `chunk`-element interleaved slices {q, q + n/chunk, ...}. When a
    row's m-th largest slice maximum exceeds its (m+1)-th, every entry that can enter its top
    m (ties included) lies in those m slices, which are ranked by `_rank`; the rare rows where
    the two are equal are searched whole.
    """
    r, n = S.shape
    if n % chunk != 0 or n // chunk <= 2 * m:
        return _top_exact(S, m)
    nch = n // chunk
    S3 = S.view(r, chunk, nch)  # S3[i, t, q] = S[i, t·nch + q]
    top, slices = S3.amax(dim=1).topk(m + 1, dim=1)  # (r, m + 1), sorted
    slices = slices[:, :m]
    cand = torch.gather(S3, 2, slices.unsqueeze(1).expand(r, chunk, m))  # (r, chunk, m)

    def cols(pos: Tensor, rows: Tensor | None) -> Tensor:  # pos = t·m + slot
        sl = slices if rows is None else slices[rows]
        return sl.gather(1, pos % m) + (pos // m) * nch

    keys = _rank(cand.reshape(r, chunk * m), m, cols)
    tied = (top[:, m - 1] == top[:, m]).nonzero().flatten()
    if tied.numel():
        keys[tied] = _order_keys(S[tied], torch.arange(n, device=S.device)).topk(m, dim=1).values
    return _decode_keys(keys)


def _top_cols(S: Tensor, m: int, chunk: int) -> tuple[Tensor, Tensor]:
    """Top-m entries of each column of a tile, as (n, m) values and row indices, in (value desc,
    row asc) order (exact; the prefilter of `_top_rows` on slices of `chunk` consecutive rows)."""
    r, n = S.shape
    if r % chunk != 0 or r // chunk <= 2 * m:
        return _top_exact(S.T, m)
    nch = r // chunk
    S3 = S.view(nch, chunk, n)  # S3[q, t, j] = S[q·chunk + t, j]
    top, slices = S3.amax(dim=1).T.topk(m + 1, dim=1)  # (n, m + 1), sorted
    slices = slices[:, :m]
    cand = torch.gather(S3, 0, slices.T.unsqueeze(1).expand(m, chunk, n))  # (m, chunk, n)

    def rows_of(pos: Tensor, cols: Tensor | None) -> Tensor:  # pos = slot·chunk + t
        sl = slices if cols is None else slices[cols]
        return sl.gather(1, pos // chunk) * chunk + pos % chunk

    keys = _rank(cand.reshape(m * chunk, n).T, m, rows_of)
    tied = (top[:, m - 1] == top[:, m]).nonzero().flatten()
    if tied.numel():
        keys[tied] = (
            _order_keys(S[:, tied].T, torch.arange(r, device=S.device)).topk(m, dim=1).values
        )
    return _decode_keys(keys)


def _merge(vals: Tensor, idx: Tensor, lo: int, hi: int, new_v: Tensor, new_i: Tensor) -> None:
    """Merge candidates (new_v, new_i) of rows lo:hi into the running top-m (vals, idx) in place,
    keeping the (value desc, index asc) order."""
    m = vals.shape[1]
    cat_v = torch.cat([vals[lo:hi], new_v], dim=1)
    cat_i = torch.cat([idx[lo:hi], new_i], dim=1)

    def index(pos: Tensor, rows: Tensor | None) -> Tensor:
        return (cat_i if rows is None else cat_i[rows]).gather(1, pos)

    top_v, top_i = _decode_keys(_rank(cat_v, m, index))
    vals[lo:hi] = top_v
    idx[lo:hi] = top_i


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
    """Top-m (by Y Y^T, self excluded) of every row of Y, ties by the lower index.

    Returns:
        vals (V, m) float32 sorted descending (-inf where fewer than m other rows exist),
        idx (V, m) int64, ascending among equal values (-1 where vals is -inf).
    """
    V = Y.shape[0]
    vals = torch.full((V, m), -math.inf, dtype=torch.float32, device=Y.device)
    idx = torch.full((V, m), _LOW, dtype=torch.int64, device=Y.device)  # placeholders rank last
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
        (V, k) int64: row v lists its neighbours by decreasing cosine, equal cosines by
        increasing index (deterministic; the first k' < k columns are the KNN@k' lists).

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
    Y = normalize_rows(X)
    plan = _Plan(block=block_size, chunk=chunk)
    unique_rows, inverse = torch.unique(Y, dim=0, return_inverse=True)
    if unique_rows.shape[0] == V:
        return _top_m_all(Y, k, plan)[1]
    return _knn_with_duplicates(unique_rows, inverse, k, plan)


def _knn_with_duplicates(unique_rows: Tensor, inverse: Tensor, k: int, plan: _Plan) -> Tensor:
    """`knn_indices` of a matrix with exactly duplicated rows, from its U distinct rows.

    Copies of one row must tie exactly, and their order must then follow the index. Computed in
    one product per tile, two copies can differ in the last bit, by where the tiling puts them
    (seen with a 16-core BLAS): so the similarities are computed once per pair of DISTINCT rows
    and every copy takes its row's value. Rows are grouped by their distinct row (groups ranked
    by first index), the top-m groups of every group are found among the distinct rows
    (m = min(k, U − 1)), and each row's k neighbours are the members of its own group (value
    ŷ·ŷ, itself excluded) and of those m groups, by decreasing value and increasing index.

    Args:
        unique_rows: (U, d) the distinct normalised rows; inverse: (V,) each row's distinct row.

    Returns:
        (V, k) int64, as `knn_indices`.
    """
    V, U = inverse.shape[0], unique_rows.shape[0]
    rows = torch.arange(V, device=inverse.device)
    first = torch.full((U,), V, dtype=torch.int64, device=inverse.device)
    first = first.scatter_reduce(0, inverse, rows, "amin")
    order = torch.argsort(first)  # groups by their first index: index tie-breaking carries over
    rank = torch.empty_like(order)
    rank[order] = torch.arange(U, device=order.device)
    unique_rows, group = unique_rows[order], rank[inverse]
    m = min(k, U - 1)
    vals, idx = _top_m_all(unique_rows, m, plan)
    self_vals = (unique_rows * unique_rows).sum(dim=1)
    members: list[list[int]] = [[] for _ in range(U)]
    for row, g in enumerate(group.tolist()):
        members[g].append(row)  # ascending, as rows are visited in order
    vals_l, idx_l, self_l = vals.tolist(), idx.tolist(), self_vals.tolist()
    out = torch.empty(V, k, dtype=torch.int64)
    for g in range(U):
        candidates = [(-self_l[g], r) for r in members[g]]
        for value, h in zip(vals_l[g], idx_l[g], strict=True):
            candidates.extend((-value, r) for r in members[h])
        candidates.sort()
        for row in members[g]:
            out[row] = torch.tensor([r for _, r in candidates if r != row][:k])
    return out.to(inverse.device)


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
    similarity, self excluded, exact ties broken by the lower token index (bias paper, §4.1
    and Table 5). Unitless, in [0, 1]; about k / (V - 1) for unrelated matrices.

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
