"""Statistics for comparing evaluations: Wilson interval, exact McNemar test, paired bootstrap.

All three take per-item results, so that two evaluations of the same items (a base model and
its update) are compared item by item. docs/evaluation.md gives each definition.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

_BOOTSTRAP_CHUNK = 1000  # resamples drawn per step (bounds memory at 1000 x n indices)


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    With p̂ = successes / n and z the two-sided standard-normal quantile of `confidence`
    (z = Φ⁻¹(1 − (1 − confidence)/2), 1.959964 at 0.95):

        center = (p̂ + z²/(2n)) / (1 + z²/n)
        half   = z / (1 + z²/n) · sqrt(p̂(1 − p̂)/n + z²/(4n²))

    Args:
        successes: number of successes, 0 <= successes <= n.
        n: number of trials (>= 1).
        confidence: coverage of the interval, in (0, 1).

    Returns:
        (low, high), a subinterval of [0, 1] containing p̂.

    Raises:
        ValueError: n < 1, successes outside [0, n], or confidence outside (0, 1).
    """
    if n < 1:
        raise ValueError(f"the Wilson interval needs n >= 1 items, got n = {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n] = [0, {n}], got {successes}")
    _check_confidence(confidence)
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    p = successes / n
    denominator = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n))
    # At 0 or n successes the bound is 0 or 1 exactly (center ∓ half cancels, up to rounding).
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return (low, high)


@dataclass(frozen=True)
class McNemarResult:
    """Exact McNemar test of two paired sets of binary outcomes.

    Attributes:
        n: number of paired items.
        only_a: items A got right and B wrong (the usual b).
        only_b: items B got right and A wrong (the usual c).
        p_value: exact two-sided p-value, min(1, 2 P[X <= min(b, c)]), X ~ Bin(b + c, 1/2);
            1 when b + c = 0.
    """

    n: int
    only_a: int
    only_b: int
    p_value: float


def mcnemar_exact(a_correct: Sequence[bool], b_correct: Sequence[bool]) -> McNemarResult:
    """Exact (binomial) McNemar test: do A and B differ on the items where they disagree?

    Under the null hypothesis each discordant item is equally likely to favour A or B, so
    b ~ Bin(b + c, 1/2). The p-value is computed in exact integer arithmetic:
    min(1, 2 · Σ_{k ≤ min(b,c)} C(b + c, k) / 2^(b+c)).

    Args:
        a_correct: per-item correctness of A (bools, or 0/1).
        b_correct: per-item correctness of B, the same items in the same order.

    Raises:
        ValueError: different lengths or a value that is not a bool/0/1.
    """
    a, b = _as_bools(a_correct, "a_correct"), _as_bools(b_correct, "b_correct")
    if len(a) != len(b):
        raise ValueError(f"paired results need the same items: {len(a)} vs {len(b)} values")
    only_a = sum(x and not y for x, y in zip(a, b))
    only_b = sum(y and not x for x, y in zip(a, b))
    discordant = only_a + only_b
    if discordant == 0:
        return McNemarResult(len(a), only_a, only_b, 1.0)
    tail = sum(math.comb(discordant, k) for k in range(min(only_a, only_b) + 1))
    p_value = min(1.0, 2 * tail / 2**discordant)
    return McNemarResult(len(a), only_a, only_b, p_value)


def _as_bools(values: Sequence[bool], name: str) -> list[bool]:
    out = []
    for value in values:
        if value not in (True, False) or not isinstance(value, (bool, int, np.bool_, np.integer)):
            raise ValueError(f"{name} must hold booleans (or 0/1), got {value!r}")
        out.append(bool(value))
    return out


@dataclass(frozen=True)
class BootstrapResult:
    """Paired bootstrap of the mean difference b − a.

    Attributes:
        mean_difference: mean over items of b_i − a_i (the observed value).
        ci_low: lower end of the percentile interval of the resampled mean differences.
        ci_high: upper end of that interval.
        p_value: two-sided p-value of "no difference":
            (1 + #{r : |m_r − d̄| >= |d̄|}) / (1 + R), m_r the resampled means, d̄ the observed one.
        n: number of paired items.
        n_resamples: R.
        confidence: coverage of the interval.
    """

    mean_difference: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    n_resamples: int
    confidence: float


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    n_resamples: int = 10000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapResult:
    """Paired (item-level) bootstrap of the mean of b − a.

    Draws R = `n_resamples` resamples of the n items with replacement (numpy's
    ``default_rng(seed)``, indices drawn ``integers(0, n)`` in blocks of 1,000 resamples), takes
    the mean difference of each, and reports the percentile interval (numpy's default linear
    quantiles at (1 − confidence)/2 and (1 + confidence)/2) and the two-sided p-value of the
    centred bootstrap distribution (see `BootstrapResult`). Deterministic given `seed`.

    Args:
        a: per-item scores of A (e.g. 0/1 correctness or log-likelihoods), finite.
        b: per-item scores of B on the same items in the same order.
        n_resamples: R >= 1.
        seed: seed of the generator.
        confidence: coverage of the interval, in (0, 1).

    Raises:
        ValueError: different lengths, no items, a non-finite value, R < 1, or a bad confidence.
    """
    a_values = np.asarray(a, dtype=np.float64)
    b_values = np.asarray(b, dtype=np.float64)
    if a_values.ndim != 1 or a_values.shape != b_values.shape:
        raise ValueError(f"paired results need the same items: {len(a)} vs {len(b)} values")
    n = a_values.size
    if n < 1:
        raise ValueError("the paired bootstrap needs at least one item, got none")
    if not (np.isfinite(a_values).all() and np.isfinite(b_values).all()):
        raise ValueError("the paired bootstrap needs finite scores; got NaN or infinity")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    _check_confidence(confidence)
    differences = b_values - a_values
    observed = float(differences.mean())
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples, dtype=np.float64)
    for start in range(0, n_resamples, _BOOTSTRAP_CHUNK):
        rows = min(_BOOTSTRAP_CHUNK, n_resamples - start)
        indices = rng.integers(0, n, size=(rows, n))
        means[start : start + rows] = differences[indices].mean(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0])
    extreme = int(np.count_nonzero(np.abs(means - observed) >= abs(observed)))
    return BootstrapResult(
        mean_difference=observed,
        ci_low=float(low),
        ci_high=float(high),
        p_value=(1 + extreme) / (1 + n_resamples),
        n=n,
        n_resamples=n_resamples,
        confidence=confidence,
    )
