"""Pseudo-inverse tying (PIT): E = Z T^{-1}, W_out = T Z^T.

From "Rethinking Weight Tying: Pseudo-Inverse Tying" (§4, Appendix A):

- Z (V×d) is a shared memory with orthonormal columns, Z^T Z = I_d;
- T = L L^T (d×d) is symmetric positive definite, L lower-triangular with a
  positive diagonal (L_ii = exp(ρ_i) by default, softplus optional, optionally
  clamped to a range);
- E = Z T^{-1} and W_out = T Z^T, so W_out E = T Z^T Z T^{-1} = I_d exactly:
  the output map is the pseudo-inverse of the input map, for every L.

Nothing V×d is formed beyond Z itself: logits(h) = ((h L) L^T) Z^T and
embed(ids) = Z[ids] T^{-1} by two triangular solves on the rows looked up,
in float32 (float64 for float64 inputs) whatever the autocast dtype.

State: only `z` (V×d) and `l_param` (d×d: strictly-lower part = L's
off-diagonal, diagonal = ρ, the pre-activation of L's diagonal; the upper
triangle is unused and stays zero). E and W_out are rebuilt from them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tying.interface.base import TokenInterface
from tying.interface.linalg import (
    check_finite_matrix,
    cholesky_lower,
    orthonormal_from_gaussian,
    polar,
    polar_retraction,
)

T_INITS = ("identity", "output", "input")
DIAG_ACTIVATIONS = ("exp", "softplus")


def _activation_inverse(values: Tensor, activation: str) -> Tensor:
    """ρ such that act(ρ) = values (values > 0)."""
    if activation == "exp":
        return values.log()
    # softplus^{-1}(y) = y + log(1 - exp(-y)), stable for large y.
    return values + torch.log(-torch.expm1(-values))


def _check_t_scale(t_scale: float) -> None:
    if not (isinstance(t_scale, (int, float)) and math.isfinite(t_scale) and t_scale > 0):
        raise ValueError(
            f"t_scale must be a positive finite number (T = t_scale·I), got {t_scale!r}"
        )


def scratch_t_scale(vocab_size: int, d_model: int, row_norm: float) -> float:
    """c such that the scratch E = Z / c has mean row norm `row_norm` (on average over Z's draw).

    A Haar-random Z (V×d, orthonormal columns) has rows z_v with E‖z_v‖² = d/V exactly, and
    ‖z_v‖ concentrates at √(d/V) for V ≫ d, so c = √(d/V) / row_norm. Matching untied/TT
    initial rows, N(0, init_std²) entries of mean norm about init_std·√d, gives
    c = 1 / (init_std·√V): 0.223 for V = 50,257 and init_std = 0.02.

    Args:
        vocab_size: V.
        d_model: d.
        row_norm: target mean row norm of E (same units as the entries of E), > 0.
    """
    if not (math.isfinite(row_norm) and row_norm > 0):
        raise ValueError(f"row_norm must be a positive finite number, got {row_norm!r}")
    return math.sqrt(d_model / vocab_size) / row_norm


class PseudoInverseTying(TokenInterface):
    """PIT token interface (see the module docstring for the math).

    Args:
        Z: shared memory, (V, d) with orthonormal columns (checked to `ortho_atol`).
        L: lower-triangular Cholesky factor of T, (d, d), positive diagonal.
        trainable_z: make Z a parameter (default: a frozen buffer). After each
            optimizer step call `retract_()` (or `attach_retraction(optimizer)` once).
        diag_activation: "exp" (default) or "softplus": L_ii = act(ρ_i).
        diag_clamp: optional (min, max) range for L's diagonal.
        bias: optional output bias, (V,).
        loss_chunk_size: tokens per chunk in `loss`.
        ortho_atol: tolerance of the check max|Z^T Z − I| ≤ ortho_atol.
        retraction_eps: ridge in the polar retraction Z (Z^T Z + eps I)^{-1/2}.
    """

    def __init__(
        self,
        Z: Tensor,
        L: Tensor,
        *,
        trainable_z: bool = False,
        diag_activation: str = "exp",
        diag_clamp: tuple[float, float] | None = None,
        bias: Tensor | None = None,
        loss_chunk_size: int | None = None,
        ortho_atol: float = 1e-4,
        retraction_eps: float = 0.0,
    ) -> None:
        check_finite_matrix(Z, "Z")
        check_finite_matrix(L, "L")
        V, d = Z.shape
        if V < d:
            raise ValueError(f"PIT needs V >= d (Z has orthonormal columns), got V={V} < d={d}")
        if L.shape != (d, d):
            raise ValueError(f"L must be (d, d) = ({d}, {d}) to match Z, got {tuple(L.shape)}")
        if diag_activation not in DIAG_ACTIVATIONS:
            raise ValueError(
                f"diag_activation must be one of {DIAG_ACTIVATIONS}, got {diag_activation!r}"
            )
        if diag_clamp is not None:
            lo, hi = diag_clamp
            if not (0 < lo < hi):
                raise ValueError(
                    f"diag_clamp must be (min, max) with 0 < min < max, got {diag_clamp}"
                )
        gram_err = (
            (Z.to(torch.float64).T @ Z.to(torch.float64) - torch.eye(d, dtype=torch.float64))
            .abs()
            .max()
        )
        if gram_err > ortho_atol:
            raise ValueError(
                f"Z must have orthonormal columns: max|Z^T Z - I| = {gram_err.item():.2e} > {ortho_atol:.0e}; "
                "build Z with PseudoInverseTying.scratch/from_teacher or tying.interface.linalg.polar"
            )
        upper = torch.triu(L, diagonal=1)
        if bool((upper != 0).any()):
            raise ValueError("L must be lower-triangular (its strict upper triangle is not zero)")
        diag = torch.diagonal(L)
        if bool((diag <= 0).any()):
            raise ValueError(
                f"L must have a positive diagonal; smallest entry is {diag.min().item():.3e}"
            )
        super().__init__(V, d, bias, loss_chunk_size)
        self.diag_activation = diag_activation
        self.diag_clamp = tuple(diag_clamp) if diag_clamp is not None else None
        self.retraction_eps = float(retraction_eps)
        z = Z.detach().clone(memory_format=torch.contiguous_format)
        if trainable_z:
            self.z = nn.Parameter(z)
        else:
            self.register_buffer("z", z)
        rho = _activation_inverse(diag.detach().to(torch.float64), diag_activation).to(L.dtype)
        l_param = torch.tril(L.detach(), diagonal=-1).clone()
        l_param.diagonal().copy_(rho)
        self.l_param = nn.Parameter(l_param)

    # ---------------------------------------------------------- constructors
    @classmethod
    def scratch(
        cls,
        vocab_size: int,
        d_model: int,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
        t_scale: float = 1.0,
        **options,
    ) -> PseudoInverseTying:
        """Z from the thin QR of a Gaussian (signs fixed: deterministic), T = t_scale · I.

        With T = c·I, E = Z / c and W_out = c·Zᵀ: c scales the input rows down and the
        output columns up by the same factor (their product is fixed by W_out E = I).
        c = 1 (the default, the PIT paper's) gives E = Z, rows of norm about √(d/V).
        `scratch_t_scale` turns a target row norm of E into c.

        Args:
            vocab_size: V.
            d_model: d.
            generator: random source of Z.
            dtype: dtype of the stored Z and L.
            t_scale: c > 0, the initial T = c·I (L = √c·I).
            options: the constructor's keyword arguments (trainable_z, ...).
        """
        _check_t_scale(t_scale)
        Z = orthonormal_from_gaussian(vocab_size, d_model, generator).to(dtype)
        L = torch.eye(d_model, dtype=dtype) * math.sqrt(t_scale)
        return cls(Z, L, **options)

    @classmethod
    def from_teacher(
        cls,
        E0: Tensor,
        t_init: str = "output",
        *,
        dtype: torch.dtype = torch.float32,
        rank_rtol: float | None = None,
        **options,
    ) -> PseudoInverseTying:
        """PIT from a pretrained embedding E0 (V×d) via its polar decomposition E0 = U H (float64).

        Z = U, and T by `t_init`:
            "identity": T = I (E = U, W_out = U^T);
            "output":   T = H, so W_out = H U^T = E0^T: the teacher's (tied) head is kept exactly;
            "input":    T = H^{-1}, so E = U H = E0: the teacher's embedding is kept exactly.
        Both cannot hold unless E0 has orthonormal columns, since W_out E = I_d.

        Args:
            E0: teacher embedding, (V, d), finite, full column rank, V >= d.
            t_init: "identity", "output" or "input".
            dtype: dtype of the stored Z and L.
            rank_rtol: rank threshold of `tying.interface.linalg.polar`.
            options: constructor keyword arguments (trainable_z, bias, ...).
        """
        if t_init not in T_INITS:
            raise ValueError(f"t_init must be one of {T_INITS}, got {t_init!r}")
        p = polar(E0, rank_rtol=rank_rtol)
        d = E0.shape[1]
        if t_init == "identity":
            L = torch.eye(d, dtype=torch.float64)
        elif t_init == "output":
            L = cholesky_lower(p.H)
        else:
            L = cholesky_lower(torch.linalg.inv(p.H))
        return cls(p.U.to(dtype), L.to(dtype), **options)

    # ---------------------------------------------------------- factors
    @property
    def trainable_z(self) -> bool:
        """Whether Z is a parameter (True) or a frozen buffer (False)."""
        return isinstance(self.z, nn.Parameter)

    def cholesky_factor(self, l_param: Tensor | None = None) -> Tensor:
        """L (d×d), lower-triangular with diagonal act(ρ) (clamped if configured).

        Args:
            l_param: the raw parameter to read (default `self.l_param`; a side view when tracking).
        """
        l_param = self.l_param if l_param is None else l_param
        rho = torch.diagonal(l_param)
        diag = rho.exp() if self.diag_activation == "exp" else F.softplus(rho)
        if self.diag_clamp is not None:
            diag = diag.clamp(*self.diag_clamp)
        return torch.tril(l_param, diagonal=-1) + torch.diag_embed(diag)

    def transform(self) -> Tensor:
        """T = L L^T (d×d), symmetric positive definite."""
        L = self.cholesky_factor()
        return L @ L.T

    def _solve_dtype(self) -> torch.dtype:
        return torch.float64 if self.z.dtype == torch.float64 else torch.float32

    def _apply_inverse_transform(self, rows: Tensor, L: Tensor) -> Tensor:
        """rows T^{-1} for rows (n, d): solve X L L^T = rows by two triangular solves.

        Runs in float32 (float64 for float64 state) with autocast off; never inverts T.
        """
        work = self._solve_dtype()
        with torch.autocast(rows.device.type, enabled=False):
            L = L.to(work)
            Y = torch.linalg.solve_triangular(
                L.T, rows.to(work), upper=True, left=False
            )  # Y L^T = rows
            X = torch.linalg.solve_triangular(L, Y, upper=False, left=False)  # X L = Y
        return X

    # ---------------------------------------------------------- the interface
    def embed(self, input_ids: Tensor) -> Tensor:
        """Z[ids] T^{-1}: (...) int -> (..., d), solving only for the distinct ids present."""
        self._check_ids(input_ids)
        flat = input_ids.reshape(-1)
        unique_ids, inverse = torch.unique(flat, return_inverse=True)
        z = self._on_side("input", "z", self.z)
        L = self.cholesky_factor(self._on_side("input", "l_param", self.l_param))
        X = self._apply_inverse_transform(z[unique_ids], L)
        out = X[inverse].to(self.z.dtype)
        return out.reshape(*input_ids.shape, self.d_model)

    def _head_input(self, hidden: Tensor) -> Tensor:
        L = self.cholesky_factor(self._on_side("output", "l_param", self.l_param))
        return (hidden @ L) @ L.T

    def _head_weight(self) -> Tensor:
        return self._on_side("output", "z", self.z)

    def embedding_matrix(self) -> Tensor:
        """E = Z T^{-1}, (V, d), by triangular solves on all rows."""
        return self._apply_inverse_transform(self.z, self.cholesky_factor()).to(self.z.dtype)

    def unembedding_matrix(self) -> Tensor:
        """U = W_out^T = Z T, (V, d)."""
        L = self.cholesky_factor()
        return (self.z @ L) @ L.T

    def num_parameters(self) -> int:
        """V·d (Z) + d(d+1)/2 (the free entries of L) + V if there is an output bias."""
        bias = self.vocab_size if self.bias is not None else 0
        d = self.d_model
        return self.vocab_size * d + d * (d + 1) // 2 + bias

    # ---------------------------------------------------------- training helpers
    @torch.no_grad()
    def retract_(self) -> None:
        """Polar retraction onto the Stiefel manifold: Z <- Z (Z^T Z + eps I)^{-1/2}."""
        self.z.copy_(polar_retraction(self.z, self.retraction_eps))

    def attach_retraction(self, optimizer: torch.optim.Optimizer) -> Callable[[], None]:
        """Run `retract_()` after every `optimizer.step()`; returns a function that detaches it.

        Example:
            pit = PseudoInverseTying.scratch(V, d, trainable_z=True)
            pit.attach_retraction(optimizer)   # Z stays orthonormal from now on
        """
        if not self.trainable_z:
            raise ValueError("Z is frozen (trainable_z=False): there is nothing to retract")
        handle = optimizer.register_step_post_hook(lambda *_: self.retract_())
        return handle.remove

    def log_det_t(self) -> Tensor:
        """log det T = 2 Σ_i log L_ii (scalar, differentiable), a regularizer to add to the loss."""
        return 2.0 * torch.diagonal(self.cholesky_factor()).log().sum()

    def log_diag_penalty(self) -> Tensor:
        """||log diag L||² = Σ_i (log L_ii)² (scalar, differentiable), a regularizer."""
        return torch.diagonal(self.cholesky_factor()).log().pow(2).sum()

    @torch.no_grad()
    def scale_transform_(self, c: float) -> None:
        """T <- c·T in place (L <- √c·L): E is divided by c, W_out multiplied by c; W_out E = I still.

        The diagonal is rewritten through the activation's inverse, so it needs no clamp
        (`diag_clamp`) that the scaled diagonal would leave.
        """
        _check_t_scale(c)
        L = self.cholesky_factor().to(torch.float64) * math.sqrt(c)
        diag = torch.diagonal(L)
        if self.diag_clamp is not None and bool(
            ((diag < self.diag_clamp[0]) | (diag > self.diag_clamp[1])).any()
        ):
            raise ValueError(
                f"scaling T by {c} puts L's diagonal outside diag_clamp={self.diag_clamp}: "
                "widen the clamp or choose another scale"
            )
        rho = _activation_inverse(diag, self.diag_activation)
        l_param = torch.tril(L, diagonal=-1)
        l_param.diagonal().copy_(rho)
        self.l_param.copy_(l_param.to(self.l_param.dtype))

    def extra_repr(self) -> str:
        clamp = f", diag_clamp={self.diag_clamp}" if self.diag_clamp else ""
        return (
            super().extra_repr()
            + f", trainable_z={self.trainable_z}, diag_activation={self.diag_activation!r}{clamp}"
        )
