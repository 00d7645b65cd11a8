"""Closed forms of a PIT built from a teacher: Z, T and the input bias from its polar factors.

A teacher embedding (or head) M (V×d) = U H, its polar decomposition (U orthonormal columns,
H = B diag(σ) Bᵀ symmetric positive definite). A PIT built from it takes Z = U and
T = H^p / c (p = 1 "output", 0 "identity", −1 "input"): E = Z T⁻¹ has the singular values
c σ_i^{-p} along M's directions and W_out E = I_d holds exactly for every choice.

- `teacher_factors`: Z, L (T = L Lᵀ), the input bias and the scale constants, in float64;
- `pit_from_teacher`: a `PseudoInverseTying` from E0 by those factors;
- `pit_from_teacher_matrices`: the conversion's builder of PIT (options → factors →
  interface, and the `settings` the pipeline acts on: gain, scale search, fit);
- `least_squares_gain`: the final-norm gain that best keeps a tied teacher's head for a T;
- `teacher_builder`: the function that builds interface `tie` from a teacher's matrices.

Pure tensor maths: no model, no data. PIT's own maths (the interface, its retraction, its
scale change `scale_input_`) stays in `tying.interface.pit`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tying.errors import InvalidInputError
from tying.interface.base import SOURCES, TeacherConversion, TokenInterface
from tying.interface.linalg import check_finite_matrix, cholesky_lower, polar, polar_retraction
from tying.interface.options import PIT_INITS as PIT_INITS  # re-exported
from tying.interface.pit import PseudoInverseTying

#: The closed-form initialisations of T from a teacher (`pit_from_teacher`, `teacher_factors`):
#: the conversion's initialisations (`PIT_INITS`, the one list, in tying.interface.options)
#: but "fit" (the closed form CLOSED_FORM_T_INIT, then T and the final-norm gain fitted to the
#: teacher on calibration text by the pipeline, `tying.conversion.fit.fit_pit`).
T_INITS = tuple(init for init in PIT_INITS if init != "fit")
#: t_init of a conversion when none is given: "fit" measured best (docs/teacher.md); a caller
#: without calibration text falls back to CLOSED_FORM_T_INIT (with the centred memory and the
#: scale correction, the best closed form).
DEFAULT_T_INIT = "fit"
#: The closed form used without calibration text, and as the start of "fit".
CLOSED_FORM_T_INIT = "output"
#: Values of `input_scale` besides a positive number: "auto" (searched on calibration text by the
#: caller; r = 1 without it) and "none" (no scale correction).
INPUT_SCALE_MODES = ("auto", "none")
#: Exponent p of T = H^p / c for each closed-form t_init (H = polar factor of the teacher).
T_INIT_POWER = {"identity": 0, "output": 1, "input": -1}


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
        raise InvalidInputError(f"t_init must be one of {T_INITS}, got {t_init!r}")
    if input_scale is not None and not input_scale > 0:
        raise InvalidInputError(
            f"input_scale must be a positive number or None, got {input_scale!r}"
        )
    check_finite_matrix(E0, "the teacher embedding")
    M = E0.detach().to(torch.float64)
    V, d = M.shape
    mu = M.mean(dim=0) if centre else torch.zeros(d, dtype=torch.float64)
    if centre:
        if V <= d:
            raise InvalidInputError(
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
            raise InvalidInputError(bad) from None
    if isinstance(value, bool) or not float(value) > 0:
        raise InvalidInputError(bad)
    return float(value)


def pit_from_teacher(
    E0: Tensor,
    t_init: str = "output",
    *,
    dtype: torch.dtype = torch.float32,
    rank_rtol: float | None = None,
    centre: bool = False,
    input_scale: float | None = None,
    **options: Any,
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
    the final-norm gain by `teacher_factors(...).gain_factor`, as `tying.conversion.convert` does).

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
    return PseudoInverseTying(f.Z.to(dtype), f.L.to(dtype), input_bias=bias, **options)


def pit_from_teacher_matrices(
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
        raise InvalidInputError(f"source must be one of {SOURCES} or None, got {source!r}")
    fit = None if t_init is None else ("requested" if t_init == "fit" else None)
    t_init = t_init or DEFAULT_T_INIT
    if t_init not in PIT_INITS:
        raise InvalidInputError(f"t_init must be one of {PIT_INITS}, got {t_init!r}")
    if t_init == "fit":
        fit = fit or "default"
    closed = CLOSED_FORM_T_INIT if t_init == "fit" else t_init
    scale = parse_input_scale(input_scale)
    r0 = None if scale == "none" else (1.0 if scale == "auto" else float(scale))
    source = source or ("output" if closed == "output" else "input")
    M = E0 if source == "input" else U0
    work = torch.float64 if M.dtype == torch.float64 else torch.float32
    factors = teacher_factors(M, closed, centre=centre, input_scale=r0, rank_rtol=rank_rtol)
    pit = PseudoInverseTying(
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


def least_squares_gain(T: Tensor, H: Tensor, gain: Tensor, second_moment: Tensor) -> Tensor:
    """The final-norm gain g' that best reproduces a tied teacher's head for a given T.

    With Z = U (the polar factor of the centred teacher E0c = U H), the teacher's
    logits of a normalized final state n (1×d, before the gain g) are
    (n ⊙ g) H U^T up to a constant per position, and the converted model's are
    (n ⊙ g') T U^T. Their mean squared difference over states with second moment
    Σ = E[n^T n] (U has orthonormal columns, so it drops out),

        f(g') = E ||(n ⊙ g') T − (n ⊙ g) H||² = g'^T (Σ ∘ T T^T) g' − 2 g'^T (Σ ∘ T H) g + const,

    (∘ the elementwise product; (n ⊙ a) M (n ⊙ b)^T averages to a^T (Σ ∘ M) b) is a
    quadratic in g' with the minimiser

        g' = (Σ ∘ T T^T)^{-1} (Σ ∘ T H) g.

    For T = H / c it returns c·g (the scale correction keeps the head exactly).

    Args:
        T: (d, d) symmetric positive definite, the converted model's T.
        H: (d, d) the polar factor H of the centred teacher (its head is H U^T).
        gain: (d,) the teacher's final-norm gain g.
        second_moment: (d, d) Σ = E[n^T n] of the teacher's normalized final states.

    Returns:
        (d,) the gain g', float64.
    """
    T, H, g, S = (t.to(torch.float64) for t in (T, H, gain, second_moment))
    return torch.linalg.solve(S * (T @ T.T), (S * (T @ H)) @ g)


#: A teacher builder: (E0, U0, *, bias, teacher_tied, source, **options) -> TeacherConversion.
TeacherBuilder = Callable[..., TeacherConversion]

#: Interfaces whose teacher conversion needs the closed forms above; every other registered
#: interface builds itself from the teacher's matrices (`from_teacher_matrices`, a plain
#: constructor call for untied and TT).
_BUILDERS: dict[type[TokenInterface], TeacherBuilder] = {
    PseudoInverseTying: pit_from_teacher_matrices,
}


def teacher_builder(cls: type[TokenInterface]) -> TeacherBuilder:
    """The function that builds interface class `cls` from a teacher's E0 and U0 (V×d each).

    Its keyword options are the interface's conversion options (checked against its
    signature by `tying.interface.registry.check_options`).
    """
    for klass in cls.__mro__:
        if klass in _BUILDERS:
            return _BUILDERS[klass]
    return cls.from_teacher_matrices
