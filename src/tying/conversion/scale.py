"""The scale correction of a PIT conversion, searched on calibration text.

`PseudoInverseTying.scale_input_(f)` multiplies E = Z T⁻¹ (and the input bias) by f and W_out
by 1/f (T ← T/f, so W_out E = I_d still holds); multiplying the final-norm gain by f as well
keeps every logit of the head. `search_input_scale` picks f by the measured step-0
KL(teacher ‖ converted): a 1-D search in log f, one forward pass over the captured windows per
factor tried.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from tying.conversion.capture import TeacherCapture, step0_kl
from tying.conversion.model import parts_of
from tying.errors import InvalidInputError

#: Calibration tokens (the first windows) on which input_scale="auto" is searched.
SEARCH_TOKENS = 1024


def scale_final_norm_(model: nn.Module, factor: float) -> None:
    """Multiply the final norm's output of a model by `factor`, in place (gain, LayerNorm bias).

    Raises:
        ValueError: the final norm has no gain.
    """
    parts_of(model).scale_final_norm_(factor)


def scale_pit_input_(model: nn.Module, factor: float) -> None:
    """E <- factor·E (input bias too), W_out <- W_out/factor, final-norm gain <- factor·gain.

    The interface's own `scale_input_` (PIT's: T <- T/factor) does the first two, so
    W_out·E = I_d and every logit of the head are kept.
    """
    parts = parts_of(model)
    scale_input_ = getattr(parts.interface(), "scale_input_", None)
    if not callable(scale_input_):
        raise InvalidInputError(
            "the input scale applies to interfaces that rescale their input (PIT conversions) only"
        )
    scale_input_(factor)
    parts.scale_final_norm_(factor)


@dataclass
class ScaleSearch:
    """Result of `search_input_scale`.

    Attributes:
        best: the factor applied (relative to the scale the model had on entry).
        kl: KL (nats/token) at each factor tried, {factor: kl}.
    """

    best: float
    kl: dict[float, float]


def search_input_scale(
    model: nn.Module,
    capture: TeacherCapture,
    factors: Sequence[float] = (0.25, 0.5, 1.0, 2.0, 4.0),
    refine: int = 2,
) -> ScaleSearch:
    """Pick the factor f multiplying a converted PIT model's input (head kept) by measured KL.

    Tries `factors` (relative to the current scale), then `refine` rounds that try
    the geometric midpoints on each side of the best one so far; leaves the model at
    the best factor. Each try is one forward pass over the captured windows.

    Args:
        model: a PIT-converted transformers model whose final norm has a gain.
        capture: the teacher on calibration windows (`capture_teacher`).
        factors: the first grid, > 0.
        refine: rounds of bisection in log f.
    """
    current = 1.0
    tried: dict[float, float] = {}

    def measure(f: float) -> float:
        nonlocal current
        scale_pit_input_(model, f / current)
        current = f
        if f not in tried:
            tried[f] = step0_kl(model, capture)["kl"]
        return tried[f]

    for f in sorted(factors):
        measure(f)
    step = math.sqrt(sorted(factors)[1] / sorted(factors)[0]) if len(factors) > 1 else 2.0
    for _ in range(refine):
        best = min(tried, key=tried.get)
        for f in (best / step, best * step):
            measure(f)
        step = math.sqrt(step)
    best = min(tried, key=tried.get)
    scale_pit_input_(model, best / current)
    return ScaleSearch(best=best, kl=dict(sorted(tried.items())))
