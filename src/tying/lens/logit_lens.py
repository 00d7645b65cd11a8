"""The logit lens (nostalgebraist 2020): read every residual state with the model's own head.

    logits_i = head(final_norm(x_i)),   i = 0 (embedding output), 1..L (block outputs)

KL(final ‖ logit lens) per entry, in bits/token, is `logit_lens_kl`; entry L is the
model's own distribution (KL 0).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import Tensor

from tying.lens.evaluate import LensKL, evaluate_lens
from tying.loader import LoadedModel


class LogitLens:
    """The identity translator: the lens reads each residual state as it is."""

    kind = "logit"

    def translate(self, state: Tensor, index: int) -> Tensor:
        """`state` unchanged: (..., d) -> (..., d)."""
        return state


def logit_lens_kl(model: LoadedModel, batches: Iterable[Tensor], **options: Any) -> LensKL:
    """Per-entry KL(final ‖ logit lens) in bits/token; `options` as in `evaluate_lens`."""
    return evaluate_lens(model, LogitLens(), batches, **options)
