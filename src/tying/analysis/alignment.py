"""Alignment of two token matrices under identity, orthogonal and linear maps (bias paper, §4.1).

For a source S (V×d_s) and a target T (V×d_t) with one row per token, both
mean-centred (S ← S − 1 mean(S), T ← T − 1 mean(T)):

    identity    mean_v cos(S[v], T[v])                      (only when d_s = d_t)
    orthogonal  mean_v cos((S R)[v], T[v]),  R = argmin_{R^T R = I} ||S R − T||_F
                (Procrustes: R = A B^T from the SVD S^T T = A Σ B^T; a partial isometry
                when d_s ≠ d_t)
    linear      mean_v cos((S W)[v], T[v]),  W = argmin_W ||S W − T||_F
                (least squares, minimum-norm solution)

Each score is a mean cosine similarity over tokens: unitless, in [-1, 1].
The maps are fitted on all V tokens (V ≫ d: d_s·d_t parameters against V·d_t
targets). A zero row has cosine 0.

Numerics: float64 throughout. The least-squares solution uses the
eigendecomposition of the Gram matrix S^T S: W = (S^T S)^+ S^T T, where
directions of S with singular value below 1e-6 × the largest count as null
(as `lstsq` with that rcond would).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from tying.analysis._validate import check_matrix, check_same_rows
from tying.analysis.rowwise import row_cosine

#: Relative singular-value cutoff of the least-squares map.
LSTSQ_RCOND = 1e-6

#: Keys of the dict returned by `alignment`.
ALIGNMENT_KEYS = ("identity", "orthogonal", "linear")


def _centred(X: Tensor) -> Tensor:
    X64 = X.detach().to(torch.float64)
    return X64 - X64.mean(dim=0, keepdim=True)


def procrustes_map(S: Tensor, T: Tensor) -> Tensor:
    """R minimizing ||S R − T||_F over R with orthonormal columns (or rows), (d_s, d_t), float64."""
    M = S.to(torch.float64).T @ T.to(torch.float64)
    A, _, Bh = torch.linalg.svd(M, full_matrices=False)
    return A @ Bh


def least_squares_map(S: Tensor, T: Tensor, rcond: float = LSTSQ_RCOND) -> Tensor:
    """Minimum-norm W minimizing ||S W − T||_F, (d_s, d_t), float64 (see the module docstring)."""
    S64 = S.to(torch.float64)
    G = S64.T @ S64
    evals, evecs = torch.linalg.eigh(0.5 * (G + G.T))
    top = float(evals[-1])
    if top <= 0.0:
        return torch.zeros(S.shape[1], T.shape[1], dtype=torch.float64, device=S.device)
    keep = evals > (rcond**2) * top
    W = evecs[:, keep]
    return (W / evals[keep]) @ (W.T @ (S64.T @ T.to(torch.float64)))


def alignment(src: Tensor, tgt: Tensor) -> dict[str, float | None]:
    """Mean per-token cosine between a source and a target after identity, orthogonal, linear maps.

    Args:
        src: (V, d_s), one row per token.
        tgt: (V, d_t), the same tokens in the same order.

    Returns:
        {"identity": float | None (None when d_s != d_t), "orthogonal": float, "linear": float};
        unitless, in [-1, 1] (module docstring).

    Raises:
        ValueError: not finite matrices, different numbers of rows, or fewer than 2 tokens.
    """
    check_matrix(src, "the source matrix")
    check_matrix(tgt, "the target matrix")
    check_same_rows(src, tgt, "the source matrix", "the target matrix")
    if src.shape[0] < 2:
        raise ValueError(f"alignment needs at least 2 tokens (rows), got {src.shape[0]}")
    S = _centred(src)
    T = _centred(tgt)
    identity = float(row_cosine(S, T).mean()) if S.shape[1] == T.shape[1] else None
    orthogonal = float(row_cosine(S @ procrustes_map(S, T), T).mean())
    linear = float(row_cosine(S @ least_squares_map(S, T), T).mean())
    return {"identity": identity, "orthogonal": orthogonal, "linear": linear}


def alignment_table(
    matrices: Mapping[str, Tensor], *, both_directions: bool = False
) -> list[dict[str, Any]]:
    """`alignment` for every pair of named matrices (e.g. tied, untied_input, untied_output).

    Pairs follow the mapping's order: (first, second), (first, third), ..., each with the
    earlier name as source; with both_directions also the reverse (the linear score is not
    symmetric; identity and orthogonal are, for equal widths).

    Args:
        matrices: name -> (V, d_name), all with the same V rows (the same tokens).
        both_directions: also report target -> source.

    Returns:
        A list of {"source": name, "target": name, "identity", "orthogonal", "linear"}.
    """
    names = list(matrices)
    if len(names) < 2:
        raise ValueError(f"alignment_table needs at least two matrices, got {len(names)}")
    rows: list[dict[str, Any]] = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            pairs = [(a, b), (b, a)] if both_directions else [(a, b)]
            for s, t in pairs:
                rows.append({"source": s, "target": t, **alignment(matrices[s], matrices[t])})
    return rows
