"""Spectral distance of two embedding matrices through an omnibus embedding (bias paper, App. B).

For matrices A and B with one row per token of the same vocabulary, the published definition
(`definition="published"`, the default; AntonioLopardo/weight-tying-bias,
experiments/1_embedding_alignment/Appendix_B/reproduce_spectral_distance.py, after
"Comparing Foundation Models using Data Kernels", arXiv 2305.05126):

1. kNN graphs: with K_X[u, v] = 1 if v is among the k cosine nearest neighbours of u in X
   (self excluded; `tying.analysis.neighbors`), G_X = (K_X + K_Xᵀ)/2: weight 1 for mutual
   neighbours, 1/2 for one-way ones, zero diagonal; X = A, B.
2. Omnibus matrix (2V × 2V): M = [[G_A, (G_A + G_B)/2], [(G_A + G_B)/2, G_B]].
3. Its n_components eigenpairs of largest |λ| (scipy `eigsh`, which="LM"):
   Z = U diag(sqrt(|λ|)), split into Z_A = Z[:V] and Z_B = Z[V:].
4. distance = ‖Z_A − Z_B‖₂ / min(‖Z_A‖₂, ‖Z_B‖₂), ‖·‖₂ the spectral norm (largest singular
   value); unitless, >= 0, 0 for equal graphs.

`definition="union-frobenius"` is this package's earlier reading, kept as a named option:
binary graphs symmetrized by union (G_X[u, v] = 1 if v ∈ N(u) or u ∈ N(v)) and Frobenius
norms in step 4. On SmolLM2-135M's E against E·diag(g) (g its final-norm gain), k = 64 and
128 components, the two give 0.225 (published) and 0.172 (union-frobenius).

The published code adds 1e-8 to the denominator and takes the norms in float32; here the
norms are float64 and a half with no edges raises instead. Neither norm depends on the sign
of each eigenvector, nor on the basis chosen inside an eigenspace of repeated |λ|: both act
on Z by the same orthogonal matrix on the right, for Z_A and Z_B together. The distance does
depend on which eigenpairs make the cut when |λ_n| = |λ_{n+1}|.

Numerics: the kNN search is exact float32 (`tying.analysis.neighbors`, ties by token index).
The eigensolver runs ARPACK in float32 by default on an operator that applies M without
forming it (M x uses two sparse products with G_A and G_B), converged to float32 precision
(tol=0); `dtype=torch.float64` runs it in float64. Small problems (2V <= DENSE_MAX) use a
dense float64 eigendecomposition instead. The spectral norms are sqrt of the largest
eigenvalue of the n×n Gram matrix ZᵀZ, in float64.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.linalg import LinearOperator, eigsh
from torch import Tensor

from tying.analysis._validate import check_matrix, check_positive_int, check_same_rows
from tying.analysis.neighbors import knn_indices
from tying.threads import single_threaded

#: 2V up to which the omnibus eigenproblem is solved densely (float64) with method="auto".
DENSE_MAX = 1024


#: Graph weightings of `knn_graph`.
GRAPH_WEIGHTS = ("half", "binary")
#: Norms of `omnibus_distance`.
DISTANCE_NORMS = ("spectral", "frobenius")
#: Named definitions of `spectral_distance`: (graph weights, norm).
SPECTRAL_DEFINITIONS = {
    "published": ("half", "spectral"),
    "union-frobenius": ("binary", "frobenius"),
}


def knn_graph(
    indices: Tensor, n_nodes: int | None = None, *, weights: str = "half"
) -> sp.csr_array:
    """Symmetric kNN adjacency from neighbour lists, zero diagonal.

    With K[u, v] = 1 for v ∈ N(u) (v ≠ u):
    - weights="half" (published): G = (K + Kᵀ)/2, so G[u, v] = 1 if u and v list each other
      and 1/2 if only one lists the other;
    - weights="binary": G[u, v] = 1 if v ∈ N(u) or u ∈ N(v) (union).

    Args:
        indices: (V, k) int, row u lists the neighbours of u (no -1 entries; self entries are
            dropped).
        n_nodes: V (default: indices.shape[0]).
        weights: "half" or "binary".

    Returns:
        (V, V) scipy CSR array, float32.
    """
    if not isinstance(indices, Tensor) or indices.dim() != 2:
        raise ValueError("indices must be a (V, k) integer tensor of neighbour lists")
    if indices.is_floating_point():
        raise ValueError(f"indices must be integers, got {indices.dtype}")
    if weights not in GRAPH_WEIGHTS:
        raise ValueError(f"weights must be one of {GRAPH_WEIGHTS}, got {weights!r}")
    V, k = indices.shape
    n = V if n_nodes is None else n_nodes
    if n != V:
        raise ValueError(f"indices has {V} rows but n_nodes={n}; expected one row per node")
    idx = indices.detach().cpu().numpy().astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= V):
        raise ValueError(f"neighbour indices must lie in [0, {V}), got [{idx.min()}, {idx.max()}]")
    rows = np.repeat(np.arange(V, dtype=np.int64), k)
    cols = idx.reshape(-1)
    keep = rows != cols
    K = sp.csr_array(
        (np.ones(int(keep.sum()), dtype=np.float32), (rows[keep], cols[keep])), shape=(V, V)
    )
    G = (K + K.T).tocsr()
    if weights == "binary":
        G.data[:] = 1.0
    else:
        G.data *= 0.5
    return G


def omnibus_matrix(graph_a: sp.sparray, graph_b: sp.sparray) -> sp.csr_array:
    """M = [[G_A, (G_A + G_B)/2], [(G_A + G_B)/2, G_B]] as a (2V, 2V) CSR array (for reference)."""
    C = (graph_a + graph_b) * 0.5
    return sp.block_array([[graph_a, C], [C, graph_b]], format="csr")


def _torch_csr(G: sp.sparray, dtype: torch.dtype) -> Tensor:
    """The same matrix as a torch sparse CSR tensor (32-bit indices when they fit: faster)."""
    G = sp.csr_array(G)
    index = np.int32 if G.nnz < 2**31 else np.int64
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(
            torch.from_numpy(G.indptr.astype(index)),
            torch.from_numpy(G.indices.astype(index)),
            torch.from_numpy(G.data).to(dtype),
            size=G.shape,
            check_invariants=False,
        )


def _omnibus_operator(
    graph_a: sp.sparray, graph_b: sp.sparray, dtype: torch.dtype
) -> LinearOperator:
    """x -> M x without forming M: with x = [x1; x2],
    M x = [G_A (x1 + x2/2) + G_B x2/2 ; G_A x1/2 + G_B (x1/2 + x2)]."""
    V = graph_a.shape[0]
    GA = _torch_csr(graph_a, dtype)
    GB = _torch_csr(graph_b, dtype)
    np_dtype = np.float32 if dtype == torch.float32 else np.float64

    def matvec(x: np.ndarray) -> np.ndarray:
        xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np_dtype).reshape(-1))
        x1, x2 = xt[:V], xt[V:]
        pa = GA @ torch.stack([x1 + 0.5 * x2, 0.5 * x1], dim=1)
        pb = GB @ torch.stack([0.5 * x2, 0.5 * x1 + x2], dim=1)
        return torch.cat([pa[:, 0] + pb[:, 0], pa[:, 1] + pb[:, 1]]).numpy()

    return LinearOperator((2 * V, 2 * V), matvec=matvec, dtype=np_dtype)


def omnibus_embedding(
    graph_a: sp.sparray,
    graph_b: sp.sparray,
    n_components: int = 128,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    method: str = "auto",
) -> tuple[Tensor, Tensor]:
    """Adjacency spectral embedding of the omnibus matrix of two graphs on the same V nodes.

    Args:
        graph_a, graph_b: (V, V) symmetric sparse adjacency matrices.
        n_components: eigenpairs kept (largest |λ|), < 2V - 1.
        seed: seeds ARPACK's start vector (results are then reproducible).
        dtype: precision of the ARPACK run (torch.float32 or torch.float64).
        method: "arpack", "dense" (float64 eigh of the formed matrix, small V only) or
            "auto" (dense when 2V <= DENSE_MAX).

    Returns:
        Z (2V, n_components) float64 = U diag(sqrt(|λ|)), and λ (n_components,) float64,
        both ordered by decreasing |λ|.
    """
    if graph_a.shape != graph_b.shape or graph_a.shape[0] != graph_a.shape[1]:
        raise ValueError(
            f"graphs must be square and of the same size, got {graph_a.shape} and {graph_b.shape}"
        )
    n = 2 * graph_a.shape[0]
    check_positive_int(n_components, "n_components")
    if n_components >= n - 1:
        raise ValueError(
            f"n_components={n_components} must be < 2V - 1 = {n - 1}; use fewer components"
        )
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    if method not in ("auto", "arpack", "dense"):
        raise ValueError(f"method must be 'auto', 'arpack' or 'dense', got {method!r}")
    if method == "dense" or (method == "auto" and n <= DENSE_MAX):
        M = omnibus_matrix(graph_a, graph_b).toarray().astype(np.float64)
        with single_threaded():
            evals, evecs = np.linalg.eigh(M)
    else:
        op = _omnibus_operator(graph_a, graph_b, dtype)
        v0 = np.random.default_rng(seed).standard_normal(n).astype(op.dtype)
        with single_threaded():
            evals, evecs = eigsh(op, k=n_components, which="LM", v0=v0, tol=0.0)
    evals = evals.astype(np.float64)
    order = np.argsort(-np.abs(evals), kind="stable")[:n_components]
    lam = torch.from_numpy(evals[order].copy())
    U = torch.from_numpy(evecs[:, order].astype(np.float64))
    return U * lam.abs().sqrt(), lam


def _norm(X: Tensor, norm: str) -> float:
    """‖X‖₂ (largest singular value, via the n×n Gram matrix) or ‖X‖_F, float64."""
    X64 = X.to(torch.float64)
    if norm == "frobenius":
        return float(torch.linalg.matrix_norm(X64))
    with single_threaded():
        top = float(torch.linalg.eigvalsh(X64.T @ X64)[-1])
    return max(top, 0.0) ** 0.5


def omnibus_distance(Z: Tensor, norm: str = "spectral") -> float:
    """‖Z_A − Z_B‖ / min(‖Z_A‖, ‖Z_B‖) for Z = [Z_A; Z_B] of shape (2V, n).

    Args:
        Z: (2V, n) omnibus embedding (`omnibus_embedding`).
        norm: "spectral" (largest singular value; published) or "frobenius".

    Raises:
        ValueError: an unknown norm, or a half of Z with zero norm (a graph without edges).
    """
    if norm not in DISTANCE_NORMS:
        raise ValueError(f"norm must be one of {DISTANCE_NORMS}, got {norm!r}")
    V = Z.shape[0] // 2
    Za, Zb = Z[:V], Z[V:]
    denom = min(_norm(Za, norm), _norm(Zb, norm))
    if denom == 0.0:
        raise ValueError("an omnibus half has zero norm: the graph has no edges")
    return _norm(Za - Zb, norm) / denom


def spectral_distance(
    A: Tensor,
    B: Tensor,
    k: int = 64,
    n_components: int = 128,
    *,
    definition: str = "published",
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    method: str = "auto",
) -> float:
    """Spectral distance of two matrices through their kNN graphs' omnibus embedding.

    distance = ‖Z_A − Z_B‖ / min(‖Z_A‖, ‖Z_B‖) with Z = U sqrt(|λ|) from the n_components
    eigenpairs of largest |λ| of [[G_A, (G_A+G_B)/2], [(G_A+G_B)/2, G_B]], G_X the
    symmetrized cosine kNN graph (k neighbours) of X's rows (module docstring).
    definition="published": G_X = (K_X + K_Xᵀ)/2 and the spectral norm (the bias paper's
    code); "union-frobenius": binary union graphs and the Frobenius norm.
    Unitless, >= 0, 0 when the two kNN graphs are equal.

    Args:
        A: (V, d_a), one row per token.
        B: (V, d_b), the same tokens in the same order.
        k: neighbours per token in the kNN graphs.
        n_components: eigenpairs of the omnibus matrix kept.
        definition: "published" (default) or "union-frobenius" (see `SPECTRAL_DEFINITIONS`).
        seed: ARPACK start vector seed.
        dtype: ARPACK precision (float32 default, or float64).
        method: eigensolver, see `omnibus_embedding`.

    Raises:
        ValueError: different numbers of rows, V <= k, n_components >= 2V - 1, non-finite
            input, or an unknown definition.
    """
    weights, norm = definition_parts(definition)
    check_matrix(A, "the matrix A")
    check_matrix(B, "the matrix B")
    check_same_rows(A, B, "A", "B")
    V = A.shape[0]
    ga = knn_graph(knn_indices(A, k), V, weights=weights)
    gb = knn_graph(knn_indices(B, k), V, weights=weights)
    Z, _ = omnibus_embedding(ga, gb, n_components, seed=seed, dtype=dtype, method=method)
    return omnibus_distance(Z, norm)


def definition_parts(definition: str) -> tuple[str, str]:
    """(graph weights, norm) of a named definition ("published" or "union-frobenius").

    Raises:
        ValueError: an unknown definition.
    """
    if definition not in SPECTRAL_DEFINITIONS:
        raise ValueError(
            f"unknown spectral distance definition {definition!r}; "
            f"expected one of {', '.join(SPECTRAL_DEFINITIONS)}"
        )
    return SPECTRAL_DEFINITIONS[definition]
