"""Learning-rate schedule: linear warm-up, then cosine decay to a floor."""

from __future__ import annotations

import math


def learning_rate(
    step: int, *, lr: float, warmup_steps: int, max_steps: int, min_lr_ratio: float
) -> float:
    """Learning rate for optimizer step `step` (1-based).

    lr·step/warmup for step ≤ warmup; then lr_min + (lr − lr_min)·(1 + cos(π·p))/2
    with p = (step − warmup)/(max_steps − warmup) ∈ [0, 1] and lr_min = lr·min_lr_ratio.
    """
    if warmup_steps > 0 and step <= warmup_steps:
        return lr * step / warmup_steps
    lr_min = lr * min_lr_ratio
    span = max(1, max_steps - warmup_steps)
    progress = min(1.0, max(0.0, (step - warmup_steps) / span))
    return lr_min + (lr - lr_min) * 0.5 * (1.0 + math.cos(math.pi * progress))
