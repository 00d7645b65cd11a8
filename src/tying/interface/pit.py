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
the same logit to every token); `from_teacher(..., centre=True)` builds Z from
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
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tying.interface.base import SOURCES, GradientSplit, TeacherConversion, TokenInterface
from tying.interface.linalg import (
    check_finite_matrix,
    cholesky_lower,
    orthonormal_from_gaussian,
    polar,
    polar_retraction,
)

#: The closed-form initialisations of T from a teacher (`from_teacher`, `teacher_factors`).
T_INITS = ("identity", "output", "input")
#: Initialisations of a conversion (`from_teacher_matrices`): the closed forms, and "fit"
#: (the closed form CLOSED_FORM_T_INIT, then T and the final-norm gain fitted to the teacher
#: on calibration text by the caller, `tying.hf.calibrate.fit_pit`).
PIT_INITS = (*T_INITS, "fit")
#: t_init of a conversion when none is given: "fit" measured best (docs/teacher.md); a caller
#: without calibration text falls back to CLOSED_FORM_T_INIT (with the centred memory and the
#: scale correction, the best closed form).
DEFAULT_T_INIT = "fit"
#: The closed form used without calibration text, and as the start of "fit".
CLOSED_FORM_T_INIT = "output"
#: Values of `input_scale` besides a positive number: "auto" (searched on calibration text by the
#: caller; r = 1 without it) and "none" (no scale correction).
INPUT_SCALE_MODES = ("auto", "none")
DIAG_ACTIVATIONS = ("exp", "softplus")
#: Exponent p of T = H^p / c for each closed-form t_init (H = polar factor of the teacher).
T_INIT_POWER = {"identity": 0, "output": 1, "input": -1}


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


def _activation_inverse(values: Tensor, activation: str) -> Tensor:
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
        "t_init": "t_init",
        "pit_centre": "centre",
        "pit_input_scale": "input_scale",
    }

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
                    "(PseudoInverseTying.from_teacher(E0, centre=True))"
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
        t_init: str | None = None,
        centre: bool = True,
        input_scale: float | str = "auto",
        rank_rtol: float | None = None,
        trainable_z: bool = False,
        diag_activation: str = "exp",
        diag_clamp: tuple[float, float] | None = None,
        retraction_eps: float = 0.0,
        loss_chunk_size: int | None = None,
    ) -> TeacherConversion:
        """PIT from M = U0 or E0 (by `source`) through `teacher_factors`.

        Built in float64 factors, stored in float32 (float64 for a float64 M), then cast to
        M's dtype. Since W_out·E = I_d, PIT keeps exactly one side of the teacher unless M has
        orthonormal columns: t_init="output" keeps the head (W_out = U0^T when M = U0),
        "input" keeps the embedding (E = E0 when M = E0), "identity" takes Z = the polar
        factor of M and T = I; "fit" builds CLOSED_FORM_T_INIT and asks the caller to fit T
        and the final-norm gain on calibration text. By default M follows the closed form:
        U0 for "output" and "fit", E0 for "input" and "identity".

        Two options reduce the damage and keep W_out·E = I exactly: `centre` (Z from
        M − 1μ^T, μ as input bias) and the scale correction `input_scale` (T/c, so E sits at
        r times the teacher's scale; the caller multiplies the final-norm gain by
        `settings["gain_factor"]`, which for "output" keeps the head exactly).

        Args:
            E0, U0, bias, teacher_tied, source: see `TokenInterface.from_teacher_matrices`.
            t_init: one of PIT_INITS, or None for DEFAULT_T_INIT.
            centre: centred memory with the mean row as input bias.
            input_scale: r > 0 (E at r times the teacher's scale), "auto" (r = 1 here; the
                caller may search it on calibration text) or "none" (T exactly H^p, gain 1).
            rank_rtol: rank threshold of `tying.interface.linalg.polar`.
            trainable_z, diag_activation, diag_clamp, retraction_eps, loss_chunk_size: the
                constructor's.

        Returns:
            The conversion; its `settings` hold what a caller acts on: "t_init" (as asked, or
            the default), "closed_form" (what was built), "centre", "input_scale" (r, or None
            without correction), "gain_factor" (multiply the final-norm gain by it),
            "search_input_scale" (input_scale was "auto") and "fit" (None, "requested" when
            t_init="fit" was asked for, "default" when it is only the default: a caller
            without calibration text then keeps the closed form).
        """
        if source is not None and source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES} or None, got {source!r}")
        fit = None if t_init is None else ("requested" if t_init == "fit" else None)
        t_init = t_init or DEFAULT_T_INIT
        if t_init not in PIT_INITS:
            raise ValueError(f"t_init must be one of {PIT_INITS}, got {t_init!r}")
        if t_init == "fit":
            fit = fit or "default"
        closed = CLOSED_FORM_T_INIT if t_init == "fit" else t_init
        scale = parse_input_scale(input_scale)
        r0 = None if scale == "none" else (1.0 if scale == "auto" else float(scale))
        source = source or ("output" if closed == "output" else "input")
        M = E0 if source == "input" else U0
        work = torch.float64 if M.dtype == torch.float64 else torch.float32
        factors = teacher_factors(M, closed, centre=centre, input_scale=r0, rank_rtol=rank_rtol)
        pit = cls(
            factors.Z.to(work),
            factors.L.to(work),
            bias=None if bias is None else bias.to(work),
            input_bias=None if factors.input_bias is None else factors.input_bias.to(work),
            trainable_z=trainable_z,
            diag_activation=diag_activation,
            diag_clamp=diag_clamp,
            retraction_eps=retraction_eps,
            loss_chunk_size=loss_chunk_size,
        ).to(device=M.device, dtype=M.dtype)
        notes = []
        if M.dtype in (torch.float16, torch.bfloat16):
            notes.append(
                f"Z is stored in {M.dtype}: its columns are orthonormal only to that precision; "
                "load the model in float32 to convert exactly"
            )
        settings = {
            "t_init": t_init,
            "closed_form": closed,
            "centre": bool(centre),
            "input_scale": r0,
            "gain_factor": factors.gain_factor if r0 is not None else 1.0,
            "search_input_scale": scale == "auto",
            "fit": fit,
        }
        return TeacherConversion(pit, source, M, notes, settings)

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
    def from_teacher(
        cls,
        E0: Tensor,
        t_init: str = "output",
        *,
        dtype: torch.dtype = torch.float32,
        rank_rtol: float | None = None,
        centre: bool = False,
        input_scale: float | None = None,
        **options,
    ) -> PseudoInverseTying:
        """PIT from a pretrained embedding E0 (V×d) via its polar decomposition E0 = U H (float64).

        Z = U, and T by `t_init`:
            "identity": T = I (E = U, W_out = U^T);
            "output":   T = H, so W_out = H U^T = E0^T: the teacher's (tied) head is kept exactly;
            "input":    T = H^{-1}, so E = U H = E0: the teacher's embedding is kept exactly.
        Both cannot hold unless E0 has orthonormal columns, since W_out E = I_d.
        With `centre` the polar decomposition is that of E0 − 1μ^T (μ the mean row) and
        μ becomes the input bias; with `input_scale` T is divided by the constant c of
        `teacher_factors` (the head changes by 1/c: a caller that keeps the head multiplies
        the final-norm gain by `teacher_factors(...).gain_factor`, as `tying.hf.convert` does).

        Args:
            E0: teacher embedding, (V, d), finite, full column rank, V >= d.
            t_init: "identity", "output" or "input".
            dtype: dtype of the stored Z and L.
            rank_rtol: rank threshold of `tying.interface.linalg.polar`.
            centre: build Z from the centred teacher and add its mean row as input bias.
            input_scale: r of `teacher_factors` (None: T exactly as listed above).
            options: constructor keyword arguments (trainable_z, bias, ...).
        """
        f = teacher_factors(E0, t_init, centre=centre, input_scale=input_scale, rank_rtol=rank_rtol)
        bias = None if f.input_bias is None else f.input_bias.to(dtype)
        return cls(f.Z.to(dtype), f.L.to(dtype), input_bias=bias, **options)

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

        Built by triangular solves on all rows; W_out E = I_d holds for this matrix.
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
            _activation_inverse(diag, self.diag_activation).to(self.l_param.dtype)
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


@dataclass(frozen=True)
class TeacherFactors:
    """A PIT interface for a teacher embedding E0 (V×d), in float64 (see `teacher_factors`).

    Attributes:
        Z: (V, d), orthonormal columns: the polar factor U of E0 (of E0 − 1μ^T when centred).
        L: (d, d), lower Cholesky factor of T = H^p / c.
        input_bias: (d,) r·μ when centred (μ = mean row of E0), else None.
        input_scale: c, the constant T was divided by (E is multiplied by c, W_out by 1/c).
        relative_scale: r, the median over the polar eigendirections of σ_i(E) / σ_i(teacher).
        gain_factor: m, the factor by which a final-norm gain must be multiplied so that the
            head's median eigenvalue ratio to the teacher's tied head H U^T is 1
            (m = c / median σ^{p-1}; for "output" m = c: the head is kept exactly).
        singular_values: (d,) singular values of the (centred) teacher, descending.
        mean_row: (d,) μ (zeros when not centred).
    """

    Z: Tensor
    L: Tensor
    input_bias: Tensor | None
    input_scale: float
    relative_scale: float
    gain_factor: float
    singular_values: Tensor
    mean_row: Tensor


def teacher_factors(
    E0: Tensor,
    t_init: str = "output",
    *,
    centre: bool = False,
    input_scale: float | None = None,
    rank_rtol: float | None = None,
) -> TeacherFactors:
    """Z, L (and input bias) of a PIT built from a teacher embedding, in float64.

    With M = E0 (or E0 − 1μ^T when `centre`), M = U H its polar decomposition
    and σ_i its singular values (H = B diag(σ) B^T), Z = U and
    T = H^p / c with p = 1 ("output"), 0 ("identity") or −1 ("input"). Then
    E = Z T^{-1} has singular values c σ_i^{-p} along the same directions as M,
    a ratio ρ_i = c σ_i^{-p-1} to the teacher's; r = median_i ρ_i.

    - input_scale=None: c = 1 (T exactly H^p), r follows from it.
    - input_scale=r > 0: c = r / median_i σ_i^{-p-1}, so E sits at r times the
      teacher's scale in the bulk of the spectrum ("output": c = r s², s the
      median σ; the teacher's rows are matched where σ_i ≈ s).

    The input bias is r·μ, the mean row at the same relative scale. Because
    Z^T 1 = 0 for a centred memory, W_out (Z T^{-1} + 1 b^T) = I_d stays exact.

    Args:
        E0: teacher embedding (V, d), finite, full column rank, V > d.
        t_init: "identity", "output" or "input".
        centre: centre E0 and return its mean row as input bias.
        input_scale: r (see above) or None.
        rank_rtol: rank threshold of `tying.interface.linalg.polar`.

    Raises:
        ValueError: unknown t_init, input_scale <= 0, or a rank-deficient (centred) E0.
    """
    if t_init not in T_INIT_POWER:
        raise ValueError(f"t_init must be one of {T_INITS}, got {t_init!r}")
    if input_scale is not None and not input_scale > 0:
        raise ValueError(f"input_scale must be a positive number or None, got {input_scale!r}")
    check_finite_matrix(E0, "the teacher embedding")
    M = E0.detach().to(torch.float64)
    V, d = M.shape
    mu = M.mean(dim=0) if centre else torch.zeros(d, dtype=torch.float64)
    if centre:
        if V <= d:
            raise ValueError(
                f"a centred memory needs V > d (Z^T 1 = 0 leaves V - 1 dimensions), got V={V}, d={d}"
            )
        M = M - mu
    p = polar(M, rank_rtol=rank_rtol if rank_rtol is not None else _default_rtol(E0))
    power = T_INIT_POWER[t_init]
    sigma = p.singular_values
    bulk_in = float(sigma.pow(-power - 1).median())
    c = 1.0 if input_scale is None else float(input_scale) / bulk_in
    r = c * bulk_in
    evals, evecs = torch.linalg.eigh(p.H)
    evals = evals.clamp_min(torch.finfo(torch.float64).tiny)
    T = (evecs * (evals.pow(power) / c)) @ evecs.T
    L = cholesky_lower(T)
    gain_factor = c / float(sigma.pow(power - 1).median())
    U = p.U
    if centre:
        # Z^T 1 = H^{-1} M^T 1 = 0 in exact arithmetic; remove the rounding residue.
        U = U - U.mean(dim=0, keepdim=True)
        U = polar_retraction(U)
    return TeacherFactors(
        Z=U,
        L=L,
        input_bias=r * mu if centre else None,
        input_scale=c,
        relative_scale=r,
        gain_factor=gain_factor,
        singular_values=sigma,
        mean_row=mu,
    )


def _default_rtol(E0: Tensor) -> float:
    """The rank threshold of `polar` for the dtype E0 was stored in."""
    return E0.shape[1] * torch.finfo(E0.dtype).eps


def parse_input_scale(value: float | str | None) -> float | str:
    """`input_scale` as "auto", "none" or a positive float (None reads as "none").

    Raises:
        ValueError: anything else, with the accepted values.
    """
    if value is None:
        return "none"
    bad = f"input_scale must be a positive number, 'auto' or 'none', got {value!r}"
    if isinstance(value, str):
        if value in INPUT_SCALE_MODES:
            return value
        try:
            value = float(value)
        except ValueError:
            raise ValueError(bad) from None
    if isinstance(value, bool) or not float(value) > 0:
        raise ValueError(bad)
    return float(value)


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
