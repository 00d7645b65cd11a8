"""Small, exact linear algebra for the token interface.

Every factorization here runs in float64 (thin QR, SVD-based polar
decomposition, symmetric eigendecomposition, Cholesky) whatever the autocast
dtype; the only V-sized products (Gram matrix and the retraction product)
run in float32 unless the input is float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tying.threads import single_threaded


def check_finite_matrix(M: Tensor, name: str) -> None:
    """Raise ValueError unless `M` is a finite floating-point matrix."""
    if not isinstance(M, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(M).__name__}")
    if M.dim() != 2:
        raise ValueError(f"{name} must be a matrix (V, d), got shape {tuple(M.shape)}")
    if not M.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {M.dtype}")
    if not bool(torch.isfinite(M).all()):
        n_bad = int((~torch.isfinite(M)).sum())
        raise ValueError(
            f"{name} has {n_bad} non-finite entries (NaN or Inf); expected a finite matrix"
        )


def orthonormal_from_gaussian(
    vocab_size: int, d_model: int, generator: torch.Generator | None = None
) -> Tensor:
    """A V×d matrix with orthonormal columns: thin QR of a Gaussian, float64.

    Signs are fixed so that R has a positive diagonal, which makes the result a
    deterministic function of the Gaussian draw (Haar-distributed).

    Returns:
        Q, float64, shape (V, d), Q^T Q = I_d.
    """
    if vocab_size < d_model:
        raise ValueError(f"need V >= d for orthonormal columns, got V={vocab_size} < d={d_model}")
    G = torch.randn(vocab_size, d_model, generator=generator, dtype=torch.float64)
    Q, R = torch.linalg.qr(G, mode="reduced")
    signs = torch.sign(torch.diagonal(R))
    signs[signs == 0] = 1.0
    return (Q * signs).contiguous()


@dataclass(frozen=True)
class Polar:
    """Thin polar decomposition M = U H of a V×d matrix of full column rank.

    Attributes:
        U: (V, d), orthonormal columns, float64.
        H: (d, d), symmetric positive definite, float64; H = (M^T M)^{1/2}.
        singular_values: (d,), descending, float64.
    """

    U: Tensor
    H: Tensor
    singular_values: Tensor


def polar(M: Tensor, rank_rtol: float | None = None) -> Polar:
    """Thin polar decomposition M = U H in float64, via the SVD M = A S B^T.

    U = A B^T, H = B S B^T.

    Args:
        M: (V, d) with V >= d, finite.
        rank_rtol: M counts as rank-deficient when s_min <= rank_rtol * s_max.
            Default: d · eps(M.dtype), the numerical rank threshold of the
            dtype M was stored in.

    Raises:
        ValueError: V < d, non-finite entries, or (numerically) rank-deficient M.
    """
    check_finite_matrix(M, "the teacher embedding")
    V, d = M.shape
    if V < d:
        raise ValueError(f"polar decomposition needs V >= d, got V={V} < d={d}")
    tol = rank_rtol if rank_rtol is not None else d * torch.finfo(M.dtype).eps
    M64 = M.detach().to(torch.float64)
    A, S, Bh = torch.linalg.svd(M64, full_matrices=False)
    if S[-1] <= tol * S[0]:
        raise ValueError(
            f"the matrix is rank-deficient: smallest singular value {S[-1].item():.3e} <= "
            f"{tol:.1e} × largest {S[0].item():.3e}; a PIT memory needs a full-rank (V, d) matrix"
        )
    U = A @ Bh
    H = (Bh.T * S) @ Bh
    H = 0.5 * (H + H.T)
    return Polar(U=U, H=H, singular_values=S)


#: Coupled Newton–Schulz iterations of `newton_schulz_inverse_sqrt` (quadratic convergence:
#: from ‖I − A‖₂ ≤ 0.9 to float64 rounding within about 12; the rest is margin).
NEWTON_SCHULZ_STEPS = 24


def newton_schulz_inverse_sqrt(G: Tensor, eps: float = 0.0) -> Tensor:
    """(G + eps I)^{-1/2} of an SPD d×d matrix by coupled Newton–Schulz iterations, float64.

    With A = (G + eps I)/c, Y₀ = A, P₀ = I and S_k = (3I − P_k Y_k)/2:
    Y_{k+1} = Y_k S_k → A^{1/2}, P_{k+1} = S_k P_k → A^{-1/2}, so (G + eps I)^{-1/2} = P/√c.
    The iteration converges when ‖I − A‖₂ < 1: c = 1 when ‖G + eps I − I‖_F < 0.9 (the case
    of a Z retracted at the previous step and moved by one optimizer step), else c = ‖G + eps I‖_F
    (≥ λ_max), chosen on the device. Only matrix products: no eigendecomposition and no host
    sync, which on a GPU makes it ~10× cheaper than `torch.linalg.eigh` (benchmarks/gpu.py).
    A G that is not positive definite gives a non-finite or wrong result instead of an error;
    a training run then stops on its non-finite loss.
    """
    d = G.shape[0]
    eye = torch.eye(d, dtype=torch.float64, device=G.device)
    A = 0.5 * (G + G.T).to(torch.float64) + eps * eye
    near_identity = torch.linalg.matrix_norm(A - eye) < 0.9
    c = torch.where(
        near_identity,
        torch.ones((), dtype=torch.float64, device=G.device),
        torch.linalg.matrix_norm(A),
    )
    Y, P = A / c, eye
    for _ in range(NEWTON_SCHULZ_STEPS):
        S = 0.5 * (3.0 * eye - P @ Y)
        Y, P = Y @ S, S @ P
    return P / c.sqrt()


def spd_inverse_sqrt(G: Tensor, eps: float = 0.0) -> Tensor:
    """(G + eps I)^{-1/2} of a symmetric positive (semi)definite d×d matrix, float64.

    On the CPU by an eigendecomposition (raises when G is not positive definite); on an
    accelerator by `newton_schulz_inverse_sqrt` (no host sync)."""
    if G.device.type != "cpu":
        return newton_schulz_inverse_sqrt(G, eps)
    G64 = 0.5 * (G + G.T).to(torch.float64)
    with single_threaded():
        evals, evecs = torch.linalg.eigh(G64)
    evals = evals + eps
    if bool((evals <= 0).any()):
        raise ValueError(
            f"matrix is not positive definite (smallest eigenvalue {evals.min().item():.3e}); "
            "the memory Z has lost rank"
        )
    return (evecs * evals.rsqrt()) @ evecs.T


def polar_retraction(Z: Tensor, eps: float = 0.0) -> Tensor:
    """Nearest matrix with orthonormal columns: Z (Z^T Z + eps I)^{-1/2}.

    The Gram product and the final product run in float32 (float64 if Z is
    float64); the inverse square root in float64.

    Args:
        Z: (V, d).
        eps: ridge added to the Gram matrix.

    Returns:
        (V, d) in Z's dtype with orthonormal columns.
    """
    work = torch.float64 if Z.dtype == torch.float64 else torch.float32
    Zw = Z.to(work)
    G = Zw.T @ Zw
    M = spd_inverse_sqrt(G, eps).to(work)
    return (Zw @ M).to(Z.dtype)


def cholesky_lower(T: Tensor) -> Tensor:
    """Lower Cholesky factor of a symmetric positive definite matrix, float64."""
    T64 = 0.5 * (T + T.T).to(torch.float64)
    L, info = torch.linalg.cholesky_ex(T64)
    if int(info) != 0:
        raise ValueError("T is not symmetric positive definite (Cholesky failed)")
    return L
