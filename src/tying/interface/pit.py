"""Pseudo-inverse tying (PIT): E = Z T^{-1}, W_out = T Z^T.

From "Rethinking Weight Tying: Pseudo-Inverse Tying" (§4, Appendix A):

- Z (V×d) is a shared memory with orthonormal columns, Z^T Z = I_d;
- T = L L^T (d×d) is symmetric positive definite, L lower-triangular with a
  positive diagonal (L_ii = exp(ρ_i) by default, softplus optional, optionally
  clamped to a range);
- E = Z T^{-1} and W_out = T Z^T, so W_out E = T Z^T Z T^{-1} = I_d exactly:
  the output map is the pseudo-inverse of the input map, for every L.

Optional input bias (centred memory): with Z^T 1 = 0 (every column of Z sums
to zero) a constant row b (d,) can be added to every input vector,
E = Z T^{-1} + 1 b^T, and still W_out E = I_d + T Z^T 1 b^T = I_d exactly. A
teacher's mean embedding row is such a common offset (on a tied head it adds
the same logit to every token); a conversion with `centre=True` builds Z from
the centred teacher and carries the mean row as b. The retraction then keeps
Z^T 1 = 0 (it projects the columns onto 1^⊥ before orthonormalising).

Nothing V×d is formed beyond Z itself: logits(h) = ((h L) L^T) Z^T and
embed(ids) = Z[ids] T^{-1} in float32 (float64 for float64 inputs) whatever the
autocast dtype: on the CPU by two triangular solves on the rows looked up, on an
accelerator as one product with T^{-1} = L^{-T} L^{-1} (d×d, from one triangular
solve against I_d), where triangular solves on many rows are far slower than a
product.

State: `z` (V×d), `l_param` (d×d: strictly-lower part = L's off-diagonal,
diagonal = ρ, the pre-activation of L's diagonal; the upper triangle is unused
and stays zero) and, when centred, `input_bias` (d,). E and W_out are rebuilt
from them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tying._compat import moved_name
from tying.interface.base import GradientSplit, TeacherConversion, TokenInterface
from tying.interface.linalg import (
    check_finite_matrix,
    orthonormal_from_gaussian,
    polar_retraction,
)
from tying.interface.options import PitOptions

DIAG_ACTIVATIONS = ("exp", "softplus")
#: Teacher-conversion names that moved to `tying.conversion.closed_form` in 0.2 (kept here,
#: with a DeprecationWarning, until 0.3).
_MOVED_TO_CONVERSION = (
    "CLOSED_FORM_T_INIT",
    "DEFAULT_T_INIT",
    "INPUT_SCALE_MODES",
    "PIT_INITS",
    "T_INITS",
    "T_INIT_POWER",
    "TeacherFactors",
    "parse_input_scale",
    "teacher_factors",
)


def scratch_t_scale(t_scale: float | Literal["auto"], vocab_size: int, init_std: float) -> float:
    """The c of a scratch T = c·I: `t_scale` itself, or for "auto" c = init_std·√V.

    With T = c·I, W_out = c·Zᵀ; a Haar-random Z (orthonormal columns) has rows of mean
    squared norm exactly d/V, so W_out's columns (the output rows u_v) have norm about
    c·√(d/V), and so has a logit u_v·h of a final-normed h (‖h‖ ≈ √d, its direction
    independent of u_v) as its standard deviation. An N(0, init_std²) head (untied/TT) has
    rows of norm ≈ init_std·√d and logits of that standard deviation: c = init_std·√V starts
    PIT's output rows and logits at TT's scale (4.48 at V = 50,257, init_std = 0.02).
    E = Z/c is then c times smaller than Z; what reaches the blocks is normalised first
    (pre-norm), so it is the output side whose scale the loss sees at step 0.

    Args:
        t_scale: a positive number, or "auto".
        vocab_size: V.
        init_std: standard deviation of a standard Gaussian init of V×d matrices.
    """
    c = init_std * math.sqrt(vocab_size) if t_scale == "auto" else t_scale
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not (math.isfinite(c) and c > 0):
        raise ValueError(f"t_scale must be a positive number or 'auto', got {t_scale!r}")
    return float(c)


def solves_by_inverse(device: torch.device) -> bool:
    """Whether `embed` applies T^{-1} as a product with L^{-T} L^{-1} (accelerators) rather
    than by triangular solves on the rows (the CPU); see `PseudoInverseTying.embed`."""
    return device.type != "cpu"


def activation_inverse(values: Tensor, activation: str) -> Tensor:
    """ρ such that act(ρ) = values (values > 0)."""
    if activation == "exp":
        return values.log()
    # softplus^{-1}(y) = y + log(1 - exp(-y)), stable for large y.
    return values + torch.log(-torch.expm1(-values))


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
        input_bias: optional constant row b (d,) added to every input vector
            (E = Z T^{-1} + 1 b^T), trained with the interface. Needs Z^T 1 = 0
            (checked: max|Z^T 1| / sqrt(V) ≤ ortho_atol), which the retraction keeps.
    """

    tie = "pit"
    vocab_tensors = ("z",)
    manifold_tensors = ("z",)
    config_options = {  # noqa: RUF012
        "pit_trainable_z": "trainable_z",
        "pit_diag_activation": "diag_activation",
        "pit_diag_clamp": "diag_clamp",
    }
    options_class = PitOptions

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
        input_bias: Tensor | None = None,
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
                "build Z with PseudoInverseTying.scratch, tying.conversion.pit_from_teacher or "
                "tying.interface.linalg.polar"
            )
        upper = torch.triu(L, diagonal=1)
        if bool((upper != 0).any()):
            raise ValueError("L must be lower-triangular (its strict upper triangle is not zero)")
        diag = torch.diagonal(L)
        if bool((diag <= 0).any()):
            raise ValueError(
                f"L must have a positive diagonal; smallest entry is {diag.min().item():.3e}"
            )
        if input_bias is not None:
            if input_bias.shape != (d,):
                raise ValueError(
                    f"input_bias must have shape (d,) = ({d},), got {tuple(input_bias.shape)}"
                )
            col_sums = Z.to(torch.float64).sum(dim=0).abs().max() / V**0.5
            if col_sums > ortho_atol:
                raise ValueError(
                    f"an input bias needs a centred memory (Z^T 1 = 0), but max|Z^T 1|/sqrt(V) = "
                    f"{col_sums.item():.2e} > {ortho_atol:.0e}; build Z from the centred teacher "
                    "(tying.conversion.pit_from_teacher(E0, centre=True))"
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
        rho = activation_inverse(diag.detach().to(torch.float64), diag_activation).to(L.dtype)
        l_param = torch.tril(L.detach(), diagonal=-1).clone()
        l_param.diagonal().copy_(rho)
        self.l_param = nn.Parameter(l_param)
        if input_bias is not None:
            self.input_bias: nn.Parameter | None = nn.Parameter(
                input_bias.detach().to(Z.dtype).clone(memory_format=torch.contiguous_format)
            )
        else:
            self.register_parameter("input_bias", None)

    # ---------------------------------------------------------- constructors
    @classmethod
    def scratch(
        cls,
        vocab_size: int,
        d_model: int,
        *,
        generator: torch.Generator | None = None,
        init_std: float = 0.02,
        dtype: torch.dtype = torch.float32,
        t_scale: float | Literal["auto"] = 1.0,
        trainable_z: bool = False,
        diag_activation: str = "exp",
        diag_clamp: tuple[float, float] | None = None,
        bias: Tensor | None = None,
        loss_chunk_size: int | None = None,
        retraction_eps: float = 0.0,
    ) -> PseudoInverseTying:
        """Z from the thin QR of a Gaussian (signs fixed: deterministic), T = t_scale·I.

        `t_scale` = c sets T = c·I (L = √c·I): E = Z/c and W_out = c·Zᵀ, W_out E = I still;
        1 (the default) is the PIT paper's T = I, "auto" is `scratch_t_scale`'s
        c = init_std·√V (the only use of `init_std`). The other keywords are the constructor's.
        """
        c = scratch_t_scale(t_scale, vocab_size, init_std)
        Z = orthonormal_from_gaussian(vocab_size, d_model, generator).to(dtype)
        return cls(
            Z,
            torch.eye(d_model, dtype=dtype) * math.sqrt(c),
            trainable_z=trainable_z,
            diag_activation=diag_activation,
            diag_clamp=diag_clamp,
            bias=bias,
            loss_chunk_size=loss_chunk_size,
            retraction_eps=retraction_eps,
        )

    @classmethod
    def placeholder(
        cls, vocab_size: int, d_model: int, *, dtype: torch.dtype, bias: bool, **options: Any
    ) -> PseudoInverseTying:
        """Z = the first d columns of the identity, L = I (valid, cheap).

        With `centred=True` (in `options`, as `options()` records it) Z has columns summing
        to zero (`centred_placeholder`) and the interface an input bias (zeros).
        """
        if options.get("diag_clamp") is not None:
            options["diag_clamp"] = tuple(options["diag_clamp"])
        b = torch.zeros(vocab_size, dtype=dtype) if bias else None
        if options.pop("centred", False):
            Z = centred_placeholder(vocab_size, d_model, dtype)
            options["input_bias"] = torch.zeros(d_model, dtype=dtype)
        else:
            Z = torch.eye(vocab_size, d_model, dtype=dtype)
        return cls(Z, torch.eye(d_model, dtype=dtype), bias=b, **options)

    @classmethod
    def from_teacher_matrices(
        cls,
        E0: Tensor,
        U0: Tensor,
        *,
        bias: Tensor | None,
        teacher_tied: bool,
        source: str | None = None,
        **options: Any,
    ) -> TeacherConversion:
        """Deprecated: `tying.conversion.closed_form.pit_from_teacher_matrices` (removed in 0.3).

        A conversion builds PIT through `tying.conversion.teacher_builder`, which finds the
        closed forms in the conversion package.
        """
        build = moved_name(
            "tying.interface.pit.PseudoInverseTying.from_teacher_matrices",
            "tying.conversion.closed_form",
            "pit_from_teacher_matrices",
        )
        return build(E0, U0, bias=bias, teacher_tied=teacher_tied, source=source, **options)

    @classmethod
    def count_parameters(cls, vocab_size: int, d_model: int) -> int:
        """V·d (Z) + d(d+1)/2 (the free entries of the triangular L)."""
        return vocab_size * d_model + d_model * (d_model + 1) // 2

    @classmethod
    def stored_elements(cls, vocab_size: int, d_model: int) -> int:
        """V·d + d²: L's parameter is stored as a full d×d matrix (strict upper triangle unused)."""
        return vocab_size * d_model + d_model * d_model

    def options(self) -> dict[str, Any]:
        return {
            **super().options(),
            "trainable_z": self.trainable_z,
            "diag_activation": self.diag_activation,
            "diag_clamp": list(self.diag_clamp) if self.diag_clamp else None,
            "retraction_eps": self.retraction_eps,
            "centred": self.centred,
        }

    def gradient_splits(self) -> list[GradientSplit]:
        """L's input- against output-side gradient (primary, also as `L`), then Z's if trained."""
        splits = [
            GradientSplit("", "l_param", "l_param", shared=True),
            GradientSplit("L", "l_param", "l_param", shared=True),
        ]
        if self.trainable_z:
            splits.append(GradientSplit("Z", "z", "z", shared=True))
        return splits

    def rows_parameter(self) -> str | None:
        return "z" if self.trainable_z else None

    @classmethod
    def from_teacher(cls, E0: Tensor, t_init: str = "output", **options: Any) -> PseudoInverseTying:
        """Deprecated: `tying.conversion.closed_form.pit_from_teacher` (removed in 0.3)."""
        build = moved_name(
            "tying.interface.pit.PseudoInverseTying.from_teacher",
            "tying.conversion.closed_form",
            "pit_from_teacher",
        )
        return build(E0, t_init, **options)

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
        """rows T^{-1} for rows (n, d), in float32 (float64 for float64 state), autocast off.

        On the CPU: solve X L L^T = rows by two triangular solves (T is never inverted). On
        an accelerator (`solves_by_inverse`): X = rows (L^{-T} L^{-1}), L^{-1} from one
        triangular solve against I_d: one (n, d)×(d, d) product instead of two n-row
        triangular solves (and two more in the backward pass).
        """
        work = self._solve_dtype()
        with torch.autocast(rows.device.type, enabled=False):
            L = L.to(work)
            if solves_by_inverse(rows.device):
                eye = torch.eye(L.shape[0], dtype=work, device=L.device)
                L_inv = torch.linalg.solve_triangular(L, eye, upper=False)
                return rows.to(work) @ (L_inv.T @ L_inv)
            Y = torch.linalg.solve_triangular(
                L.T, rows.to(work), upper=True, left=False
            )  # Y L^T = rows
            X = torch.linalg.solve_triangular(L, Y, upper=False, left=False)  # X L = Y
        return X

    # ---------------------------------------------------------- the interface
    @property
    def centred(self) -> bool:
        """Whether the interface has an input bias (and so keeps Z^T 1 = 0)."""
        return self.input_bias is not None

    def embed(self, input_ids: Tensor) -> Tensor:
        """Z[ids] T^{-1} (+ b): (...) int -> (..., d); on the CPU only the distinct ids present
        are solved for, on an accelerator (or compiled) every row, without a host sync."""
        self._check_ids(input_ids)
        flat = input_ids.reshape(-1)
        z = self._on_side("input", "z", self.z)
        L = self.cholesky_factor(self._on_side("input", "l_param", self.l_param))
        if flat.device.type == "cpu" and not torch.compiler.is_compiling():
            unique_ids, inverse = torch.unique(flat, return_inverse=True)
        else:  # torch.unique would be a host sync (and a graph break): solve every row
            unique_ids, inverse = flat, None
        X = self._apply_inverse_transform(z[unique_ids], L)
        if self.input_bias is not None:
            X = X + self._on_side("input", "input_bias", self.input_bias).to(X.dtype)
        out = (X if inverse is None else X[inverse]).to(self.z.dtype)
        return out.reshape(*input_ids.shape, self.d_model)

    def _head_input(self, hidden: Tensor) -> Tensor:
        L = self.cholesky_factor(self._on_side("output", "l_param", self.l_param))
        return (hidden @ L) @ L.T

    def _head_weight(self) -> Tensor:
        return self._on_side("output", "z", self.z)

    def embedding_matrix(self) -> Tensor:
        """E = Z T^{-1} (+ 1 b^T with an input bias), (V, d): the rows the model reads.

        Built as `embed` builds rows (`_apply_inverse_transform`); W_out E = I_d holds for it.
        """
        E = self._apply_inverse_transform(self.z, self.cholesky_factor())
        if self.input_bias is not None:
            E = E + self.input_bias.to(E.dtype)
        return E.to(self.z.dtype)

    @torch.no_grad()
    def analysis_matrices(self) -> tuple[Tensor, Tensor]:
        """(E, U) computed in float64 on the CPU (W_out·E = I to float64 rounding).

        E is the rows the model reads, input bias included (W_out·1b^T = 0 for a centred Z).
        """
        Z = self.z.detach().cpu().to(torch.float64)
        L = self.cholesky_factor(self.l_param.detach().cpu().to(torch.float64))
        Y = torch.linalg.solve_triangular(L.T, Z, upper=True, left=False)
        E = torch.linalg.solve_triangular(L, Y, upper=False, left=False)
        if self.input_bias is not None:
            E = E + self.input_bias.detach().cpu().to(torch.float64)
        return E, (Z @ L) @ L.T

    def unembedding_matrix(self) -> Tensor:
        """U = W_out^T = Z T, (V, d)."""
        L = self.cholesky_factor()
        return (self.z @ L) @ L.T

    def num_parameters(self) -> int:
        """V·d (Z) + d(d+1)/2 (the free entries of L) + V (output bias) + d (input bias), if any."""
        bias = self.vocab_size if self.bias is not None else 0
        input_bias = self.d_model if self.input_bias is not None else 0
        return self.count_parameters(self.vocab_size, self.d_model) + bias + input_bias

    # ---------------------------------------------------------- training helpers
    @torch.no_grad()
    def retract_(self) -> None:
        """Polar retraction onto the Stiefel manifold: Z <- Z (Z^T Z + eps I)^{-1/2}.

        With an input bias the columns are first projected onto 1^⊥ (Z <- Z − 1 (1^T Z)/V),
        so the retracted Z keeps Z^T 1 = 0 (right-multiplication keeps columns in 1^⊥).
        """
        z = self.z
        if self.input_bias is not None:
            work = torch.float64 if z.dtype == torch.float64 else torch.float32
            z = z.to(work)
            z = z - z.mean(dim=0, keepdim=True)
        self.z.copy_(polar_retraction(z, self.retraction_eps).to(self.z.dtype))

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

    @torch.no_grad()
    def scale_input_(self, factor: float) -> None:
        """Multiply E (its rows and the input bias) by `factor` > 0 and W_out by 1/factor, in place.

        T <- T / factor: L <- L / sqrt(factor) (ρ shifts by −log(factor)/2 under "exp").
        W_out E = I_d is unchanged; a caller that keeps the head multiplies the final-norm
        gain by `factor`.
        """
        if not factor > 0:
            raise ValueError(f"the input scale factor must be > 0, got {factor}")
        L = self.cholesky_factor() / factor**0.5
        diag = torch.diagonal(L).to(torch.float64)
        self.l_param.copy_(torch.tril(L, diagonal=-1))
        self.l_param.diagonal().copy_(
            activation_inverse(diag, self.diag_activation).to(self.l_param.dtype)
        )
        if self.input_bias is not None:
            self.input_bias.mul_(factor)

    def log_det_t(self) -> Tensor:
        """log det T = 2 Σ_i log L_ii (scalar, differentiable), a regularizer to add to the loss."""
        return 2.0 * torch.diagonal(self.cholesky_factor()).log().sum()

    def log_diag_penalty(self) -> Tensor:
        """||log diag L||² = Σ_i (log L_ii)² (scalar, differentiable), a regularizer."""
        return torch.diagonal(self.cholesky_factor()).log().pow(2).sum()

    def extra_repr(self) -> str:
        clamp = f", diag_clamp={self.diag_clamp}" if self.diag_clamp else ""
        return (
            super().extra_repr()
            + f", trainable_z={self.trainable_z}, diag_activation={self.diag_activation!r}{clamp}"
            + f", input_bias={self.input_bias is not None}"
        )


def centred_placeholder(V: int, d: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """A (V, d) matrix with orthonormal columns that each sum to zero (V > d): Helmert columns.

    Column j is (1, ..., 1, −(j+1), 0, ...) / sqrt((j+1)(j+2)) with j+1 leading ones.
    """
    if V <= d:
        raise ValueError(f"a centred memory needs V > d, got V={V}, d={d}")
    j = torch.arange(d, dtype=torch.float64)
    rows = torch.arange(V, dtype=torch.float64).unsqueeze(1)
    norm = ((j + 1) * (j + 2)).rsqrt()
    Z = torch.where(rows <= j, norm, torch.zeros(()))
    Z = torch.where(rows == j + 1, -(j + 1) * norm, Z)
    return Z.to(dtype)


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_CONVERSION:
        return moved_name(f"{__name__}.{name}", "tying.conversion.closed_form", name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
