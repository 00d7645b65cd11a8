"""Interface consistency of a token interface (PIT paper, §5.5).

Notation: E (V×d) is the input embedding, U = W_out^T (V×d) the unembedding
in `nn.Linear` layout, so the output map is logits = h W_out = h U^T.

    delta_ti             ||W_out E − I_d||_F                        (unitless, >= 0)
    delta_ti_rel         delta_ti / sqrt(d)                          (unitless, >= 0)
    cosine_distance      mean_v [1 − cos(B_in[v], B_out[v])]         (unitless, in [0, 2])
    procrustes_error     min_{R ∈ O(d)} ||B_in R − B_out||_F / sqrt(d)
                         = sqrt(2 (d − ||B_in^T B_out||_*) / d)      (unitless, in [0, sqrt(2)])
    principal_angle_max  largest principal angle between col(B_in) and col(B_out)  (radians, [0, π/2])
    principal_angle_mean mean of the d principal angles                            (radians, [0, π/2])

B_in = E (E^T E)^{-1/2} and B_out = U (U^T U)^{-1/2} are the orthonormal
polar factors of E and U (B_out is also the polar factor of pinv(W_out) =
U (U^T U)^{-1}); the cosines of the principal angles are the singular values
of B_in^T B_out.

"raw" uses the stored E and U. "effective" uses the maps the network really
applies: E_eff = s·E (s = a constant embedding multiplier, e.g. sqrt(d) in
Gemma) and U_eff = U diag(g) (g = the final norm's gain: logits = (g ⊙ n) W_out
= n (diag(g) W_out), so W_out_eff = diag(g) W_out).

Because col(U) = col(E) whenever U = E M with M invertible, the Procrustes
error and the principal angles vanish for every transpose-tied model (U = E,
raw; U = E diag(g), effective) by construction; there only `delta_ti` and the
cosine distance carry information (see docs/metrics.md).

Numerics: the Gram-type products (E^T E, U^T U, U^T E) and everything d×d
run in float64 whatever the input dtype; the d×d factors come from a symmetric
eigendecomposition of the Gram matrices ((E^T E)^{-1/2}), much cheaper than an
SVD of a V×d matrix. Principal angles combine cosines (singular values of
B_in^T B_out, accurate for large angles) with sines (singular values of the
part of B_out outside col(E), accurate for small angles), the Björck–Golub
recipe: the residual N = U − E (E^T E)^{-1} E^T U is formed explicitly in
float64, so angles that vanish in exact arithmetic come out at about
κ(E)²·1e-16 rad rather than at the sqrt(1e-16) resolution of an arccos. The
Procrustes error is sqrt(2 Σ_i (1 − cos θ_i) / d), from the same angles. The
polar factors themselves are only needed row by row for the cosine distance;
those two products run in float32 (1 − cos is insensitive to first order to
their rounding: absolute error below about 1e-6).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tying.analysis._validate import (
    check_finite_scalar,
    check_matrix,
    check_same_shape,
    check_vector,
)
from tying.analysis.neighbors import tile_matmul
from tying.analysis.rowwise import row_cosine
from tying.threads import single_threaded

#: Keys of each of the "raw" and "effective" blocks returned by `consistency`.
CONSISTENCY_KEYS = (
    "delta_ti",
    "delta_ti_rel",
    "cosine_distance",
    "procrustes_error",
    "principal_angle_max",
    "principal_angle_mean",
)

#: A matrix counts as rank-deficient when s_min <= RANK_RTOL · s_max (d · eps of float32 is
#: typically smaller; this fixed bound keeps the check independent of d and of the stored dtype).
RANK_RTOL = 1e-6


def gram_factors(G: Tensor, name: str) -> tuple[Tensor, Tensor]:
    """(G^{-1/2}, G^{-1}) of a d×d Gram matrix G = M^T M (symmetric positive definite), float64.

    Args:
        G: (d, d) Gram matrix of a V×d matrix M.
        name: the matrix M, for the error message.

    Raises:
        ValueError: M is (numerically) rank-deficient: s_min(M) <= RANK_RTOL · s_max(M).
    """
    G64 = 0.5 * (G + G.T).to(torch.float64)
    with single_threaded():
        evals, evecs = torch.linalg.eigh(G64)
    top = float(evals[-1])
    if top <= 0.0 or float(evals[0]) <= (RANK_RTOL**2) * top:
        ratio = math.sqrt(max(float(evals[0]), 0.0) / top) if top > 0 else 0.0
        raise ValueError(
            f"{name} is rank-deficient (smallest/largest singular value = {ratio:.2e} <= "
            f"{RANK_RTOL:.0e}); its polar factor is undefined. Expected a full-rank (V, d) matrix "
            "with V >= d (check for an all-zero or duplicated embedding, or a zero norm gain)"
        )
    return (evecs * evals.rsqrt()) @ evecs.T, (evecs / evals) @ evecs.T


def principal_angles(C: Tensor, H: Tensor) -> Tensor:
    """Principal angles (radians, ascending) from their cosines and squared sines.

    Args:
        C: (d, d) B_in^T B_out; its singular values are the cosines.
        H: (d, d) R^T R for R = B_out − B_in C, the part of B_out outside col(B_in);
            its eigenvalues are the squared sines.

    Returns:
        (d,) float64: arcsin(sine) where sine² < 1/2, arccos(cosine) elsewhere.
    """
    with single_threaded():
        cos = torch.linalg.svdvals(C).clamp(0.0, 1.0)  # descending: angles ascending
        sin = torch.linalg.eigvalsh(0.5 * (H + H.T)).clamp_min(0.0).sqrt().clamp_max(1.0)
    return torch.where(sin * sin < 0.5, torch.arcsin(sin), torch.arccos(cos))


def _block(B_in: Tensor, B_out: Tensor, X: Tensor, angles: Tensor) -> dict[str, float]:
    """The six metrics of one pair of maps.

    Args:
        B_in: (V, d) polar factor of the embedding map E (any float dtype).
        B_out: (V, d) polar factor of the unembedding map U.
        X: (d, d) W_out E = U^T E of the same maps, float64.
        angles: (d,) principal angles between col(E) and col(U), float64.
    """
    d = X.shape[0]
    eye = torch.eye(d, dtype=torch.float64, device=X.device)
    delta = float(torch.linalg.matrix_norm(X - eye))
    cos = row_cosine(B_in, B_out)
    # min_R ||B_in R - B_out||_F^2 = 2 (d - sum cos θ_i) = sum 4 sin²(θ_i / 2).
    procrustes_sq = float((4.0 * torch.sin(0.5 * angles) ** 2).sum())
    return {
        "delta_ti": delta,
        "delta_ti_rel": delta / math.sqrt(d),
        "cosine_distance": float((1.0 - cos).mean()),
        "procrustes_error": math.sqrt(procrustes_sq / d),
        "principal_angle_max": float(angles.max()),
        "principal_angle_mean": float(angles.mean()),
    }


def _float32_product(M: Tensor, F: Tensor) -> Tensor:
    """M @ F in float32 (M: (V, d) any float dtype, F: (d, n) float64)."""
    return tile_matmul(M.to(torch.float32), F.T.to(torch.float32).contiguous())


def consistency(
    E: Tensor,
    U: Tensor,
    final_norm_gain: Tensor | None = None,
    embed_scale: float = 1.0,
) -> dict[str, dict[str, float]]:
    """Interface consistency of (E, U), raw and effective (see the module docstring).

    Args:
        E: input embedding, (V, d), V >= d, full column rank.
        U: unembedding W_out^T, (V, d) (the `nn.Linear` weight of the head).
        final_norm_gain: g, (d,), the elementwise gain of the norm before the head
            (None: no gain, g = 1). Folded into the effective output map: U_eff = U diag(g).
        embed_scale: s, a constant multiplier applied to embeddings before the first
            block (1.0: none). Folded into the effective input map: E_eff = s E.

    Returns:
        {"raw": {...}, "effective": {...}}, each with the keys CONSISTENCY_KEYS
        (floats; units in the module docstring).

    Raises:
        ValueError: shapes differ, V < d, non-finite entries, a zero `embed_scale`,
            a gain of the wrong shape, or a rank-deficient (raw or effective) matrix.
    """
    check_matrix(E, "the embedding E")
    check_matrix(U, "the unembedding U (= W_out^T)")
    check_same_shape(E, U, "the embedding E", "the unembedding U")
    V, d = E.shape
    if V < d:
        raise ValueError(
            f"consistency needs V >= d (a V×d matrix with orthonormal columns), got V={V} < d={d}; "
            "pass E and U as (vocab_size, d_model)"
        )
    s = check_finite_scalar(embed_scale, "embed_scale", nonzero=True)
    g = None
    if final_norm_gain is not None:
        g = check_vector(final_norm_gain, d, "final_norm_gain").detach().to(torch.float64)
        g = g.to(E.device)

    E64 = E.detach().to(torch.float64)
    U64 = U.detach().to(torch.float64)
    X = U64.T @ E64  # W_out E, (d, d)
    G_U = U64.T @ U64
    P, G_E_inv = gram_factors(E64.T @ E64, "the embedding E")
    Q, _ = gram_factors(G_U, "the unembedding U")
    # The part of U outside col(E): N = U - E (E^T E)^{-1} E^T U. It is the same for the
    # effective maps up to diag(g) on the right (N_eff = N diag(g)), so one V-sized pass serves both.
    N = U64 - E64 @ (G_E_inv @ X.T)
    H = N.T @ N
    del N, E64, U64

    # Raw: B_in = E P, B_out = U Q; B_in^T B_out = P X^T Q; residual Gram Q H Q.
    raw_angles = principal_angles(P @ X.T @ Q, Q @ H @ Q)
    # Effective: E_eff = s E (B_in_eff = sign(s) B_in, (E_eff^T E_eff)^{-1/2} = P / |s|),
    # U_eff = U D with D = diag(g), W_out_eff E_eff = s D X.
    sign = 1.0 if s > 0 else -1.0
    if g is None:
        R_eff, X_eff = Q, s * X
        eff_angles = raw_angles
    else:
        Q_eff, _ = gram_factors(
            g[:, None] * G_U * g[None, :], "the effective unembedding U·diag(g)"
        )
        R_eff = g[:, None] * Q_eff  # B_out_eff = U (D Q_eff)
        X_eff = s * (g[:, None] * X)
        eff_angles = principal_angles(P @ X.T @ R_eff, R_eff.T @ H @ R_eff)

    B_in = _float32_product(E.detach(), P)
    B_outs = _float32_product(U.detach(), Q if g is None else torch.cat([Q, R_eff], dim=1))
    B_out, B_out_eff = (B_outs, B_outs) if g is None else (B_outs[:, :d], B_outs[:, d:])
    raw = _block(B_in, B_out, X, raw_angles)
    effective = _block(sign * B_in, B_out_eff, X_eff, eff_angles)
    return {"raw": raw, "effective": effective}
