"""Naive float64 reference implementations of the analysis metrics (numpy / scipy, small inputs only).

Written straight from the definitions in docs/metrics.md, with the textbook
algorithms (SVD polar factors, scipy's Procrustes and subspace angles, lstsq,
full similarity matrices, dense eigendecomposition), so that the fast code in
`tying.analysis` can be checked against them.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import torch


def as64(X: torch.Tensor) -> np.ndarray:
    return X.detach().to(torch.float64).numpy()


def polar_factor(M: np.ndarray) -> np.ndarray:
    A, _, Bh = np.linalg.svd(M, full_matrices=False)
    return A @ Bh


def mean_row_cosine(A: np.ndarray, B: np.ndarray) -> float:
    return float(
        np.mean(np.sum(A * B, axis=1) / (np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1)))
    )


def consistency(E: np.ndarray, U: np.ndarray) -> dict[str, float]:
    """The six interface-consistency metrics of (E, U) from their definitions."""
    d = E.shape[1]
    B_in, B_out = polar_factor(E), polar_factor(U)
    R, _ = sla.orthogonal_procrustes(B_in, B_out)
    angles = sla.subspace_angles(B_in, B_out)
    delta = float(np.linalg.norm(U.T @ E - np.eye(d)))
    return {
        "delta_ti": delta,
        "delta_ti_rel": delta / np.sqrt(d),
        "cosine_distance": 1.0 - mean_row_cosine(B_in, B_out),
        "procrustes_error": float(np.linalg.norm(B_in @ R - B_out) / np.sqrt(d)),
        "principal_angle_max": float(angles.max()),
        "principal_angle_mean": float(angles.mean()),
    }


def alignment(src: np.ndarray, tgt: np.ndarray, identity: str = "raw") -> dict[str, float | None]:
    S = src - src.mean(axis=0)
    T = tgt - tgt.mean(axis=0)
    same = S.shape[1] == T.shape[1]
    ident = None
    if same:
        ident = mean_row_cosine(src, tgt) if identity == "raw" else mean_row_cosine(S, T)
    if same:
        R, _ = sla.orthogonal_procrustes(S, T)
    else:
        A, _, Bh = np.linalg.svd(S.T @ T, full_matrices=False)
        R = A @ Bh
    W, *_ = np.linalg.lstsq(S, T, rcond=None)
    return {
        "identity": ident,
        "orthogonal": mean_row_cosine(S @ R, T),
        "linear": mean_row_cosine(S @ W, T),
    }


def cosine_matrix(X: np.ndarray) -> np.ndarray:
    """(V, V) float64 cosines, each entry summed by the same elementwise reduction (not a BLAS
    product, whose edge kernels can round equal dot products differently), so that equal rows
    give bitwise-equal entries; zero rows have cosine 0."""
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    Xn = np.divide(X, norms, out=np.zeros_like(X), where=norms > 0)
    return np.stack([(Xn * row).sum(axis=1) for row in Xn])


def knn_lists(X: np.ndarray, k: int) -> np.ndarray:
    """(V, k) cosine nearest neighbours of every row (self excluded), by a full float64 stable
    argsort: decreasing cosine, equal cosines by increasing index."""
    S = cosine_matrix(X)
    np.fill_diagonal(S, -np.inf)
    return np.argsort(-S, axis=1, kind="stable")[:, :k]


def knn_sets(X: np.ndarray, k: int) -> list[set[int]]:
    """k cosine nearest neighbours of every row (self excluded), as sets."""
    return [set(row.tolist()) for row in knn_lists(X, k)]


def knn_overlap(A: np.ndarray, B: np.ndarray, k: int) -> float:
    na, nb = knn_sets(A, k), knn_sets(B, k)
    return float(np.mean([len(a & b) / k for a, b in zip(na, nb, strict=True)]))


def knn_adjacency(X: np.ndarray, k: int, weights: str = "half") -> np.ndarray:
    """Directed 0/1 kNN matrix K; "half": (K + K^T)/2, "binary": the union (max of K, K^T)."""
    V = X.shape[0]
    K = np.zeros((V, V))
    for v, nbrs in enumerate(knn_sets(X, k)):
        for u in nbrs:
            K[v, u] = 1.0
    return (K + K.T) / 2 if weights == "half" else np.maximum(K, K.T)


def spectral_distance(
    A: np.ndarray, B: np.ndarray, k: int, n_components: int, definition: str = "published"
) -> float:
    """Published: half-weight graphs, ||Z_a − Z_b||_2 / min(||Z_a||_2, ||Z_b||_2) with the
    spectral norm (largest singular value); "union-frobenius": binary graphs, Frobenius."""
    weights, order = ("half", 2) if definition == "published" else ("binary", "fro")
    Ga, Gb = knn_adjacency(A, k, weights), knn_adjacency(B, k, weights)
    C = (Ga + Gb) / 2
    M = np.block([[Ga, C], [C, Gb]])
    evals, evecs = np.linalg.eigh(M)
    top = np.argsort(-np.abs(evals))[:n_components]
    Z = evecs[:, top] * np.sqrt(np.abs(evals[top]))
    V = A.shape[0]
    Za, Zb = Z[:V], Z[V:]

    def norm(X: np.ndarray) -> float:
        return float(np.linalg.norm(X, order))

    return norm(Za - Zb) / min(norm(Za), norm(Zb))
