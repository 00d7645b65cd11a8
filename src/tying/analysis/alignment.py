"""Alignment of two token matrices under identity, orthogonal and linear maps (bias paper, §4.1).

For a source S (V×d_s) and a target T (V×d_t) with one row per token; S_c, T_c are the
mean-centred matrices (S_c = S − 1 mean(S), T_c = T − 1 mean(T)):

    identity    mean_v cos(S[v], T[v])   raw rows, no map (only when d_s = d_t)
                (identity="centred": mean_v cos(S_c[v], T_c[v]))
    orthogonal  mean_v cos((S_c R)[v], T_c[v]),  R = argmin_{R^T R = I} ||S_c R − T_c||_F
                (Procrustes: R = A B^T from the SVD S_c^T T_c = A Σ B^T; a partial isometry
                when d_s ≠ d_t)
    linear      mean_v cos((S_c W)[v], T_c[v]),  W = argmin_W ||S_c W − T_c||_F
                (least squares, minimum-norm solution)

Each score is a mean cosine similarity over tokens: unitless, in [-1, 1].
The maps are fitted on all V tokens (V ≫ d: d_s·d_t parameters against V·d_t
targets). A zero row has cosine 0.

These are the published functions (AntonioLopardo/weight-tying-bias, Table 1: identity is
"No transformation", the raw cosine of compare_cross_model.py; orthogonal and linear centre
both matrices). The paper's rows read "source → target", e.g. "Output (U) → Tied": the
untied matrix is the source, mapped onto the tied one. Identity and orthogonal are
symmetric in (S, T) for equal widths; linear is not.

Numerics: float64 throughout. The least-squares solution uses the
eigendecomposition of the Gram matrix S_c^T S_c: W = (S_c^T S_c)^+ S_c^T T_c, where
directions of S_c with singular value below 1e-6 × the largest count as null
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
#: How `alignment` compares rows under the identity map: raw (published) or mean-centred.
IDENTITY_MODES = ("raw", "centred")


def centred(X: Tensor) -> Tensor:
    """X (n, d) in float64 with its column means removed (each column sums to 0), (n, d)."""
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


def alignment(src: Tensor, tgt: Tensor, *, identity: str = "raw") -> dict[str, float | None]:
    """Mean per-token cosine between a source and a target after identity, orthogonal, linear maps.

    Args:
        src: (V, d_s), one row per token: the matrix that is mapped.
        tgt: (V, d_t), the same tokens in the same order: the matrix it is mapped onto.
        identity: "raw" (default, published: the stored rows) or "centred" (both matrices
            mean-centred first, as for the fitted maps).

    Returns:
        {"identity": float | None (None when d_s != d_t), "orthogonal": float, "linear": float};
        unitless, in [-1, 1] (module docstring).

    Raises:
        ValueError: not finite matrices, different numbers of rows, fewer than 2 tokens, or
            an unknown identity mode.
    """
    if identity not in IDENTITY_MODES:
        raise ValueError(f"identity must be one of {IDENTITY_MODES}, got {identity!r}")
    check_matrix(src, "the source matrix")
    check_matrix(tgt, "the target matrix")
    check_same_rows(src, tgt, "the source matrix", "the target matrix")
    if src.shape[0] < 2:
        raise ValueError(f"alignment needs at least 2 tokens (rows), got {src.shape[0]}")
    S = centred(src)
    T = centred(tgt)
    same_width = S.shape[1] == T.shape[1]
    if not same_width:
        ident = None
    elif identity == "raw":
        ident = float(row_cosine(src, tgt).mean())
    else:
        ident = float(row_cosine(S, T).mean())
    orthogonal = float(row_cosine(S @ procrustes_map(S, T), T).mean())
    linear = float(row_cosine(S @ least_squares_map(S, T), T).mean())
    return {"identity": ident, "orthogonal": orthogonal, "linear": linear}


def alignment_table(
    matrices: Mapping[str, Tensor], *, both_directions: bool = False, identity: str = "raw"
) -> list[dict[str, Any]]:
    """`alignment` for every pair of named matrices (e.g. tied, untied_input, untied_output).

    Pairs follow the mapping's order: (first, second), (first, third), ..., each with the
    earlier name as source; with both_directions also the reverse (the linear score is not
    symmetric; identity and orthogonal are, for equal widths). To read like the bias paper's
    Table 1 ("Input (U) → Output (U)", "Output (U) → Tied", "Input (U) → Tied"), list the
    untied input first, then the untied output, then the tied matrix.

    Args:
        matrices: name -> (V, d_name), all with the same V rows (the same tokens).
        both_directions: also report target -> source.
        identity: "raw" or "centred", see `alignment`.

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
                rows.append(
                    {
                        "source": s,
                        "target": t,
                        **alignment(matrices[s], matrices[t], identity=identity),
                    }
                )
    return rows
