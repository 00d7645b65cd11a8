"""Statistics for comparing evaluations: Wilson interval, exact McNemar test, paired bootstrap;
and for comparing interfaces over independently trained units: the exact sign-flip test, Holm's
step-down correction and the difference of two regressions at a matched base loss.

The first three take per-item results, so that two evaluations of the same items (a base model
and its update) are compared item by item. The last three take one value per unit of
replication (an independently trained base and adapter, a seed). docs/evaluation.md gives each
definition.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

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


@dataclass(frozen=True)
class SignFlipResult:
    """Exact sign-flip (paired permutation) test of a mean difference.

    Attributes:
        mean_difference: mean of the n paired differences (the observed statistic).
        p_value: the fraction of the 2^n sign patterns whose mean is at least as extreme as the
            observed one (two-sided: |mean| ≥ |observed|), the observed pattern included.
        smallest_p_value: the smallest p-value n units can give (2/2^n two-sided, 1/2^n one-sided):
            with n = 8 no effect can reach p < 0.0078.
        n: number of units.
        alternative: "two-sided", "greater" (mean > 0) or "less".
    """

    mean_difference: float
    p_value: float
    smallest_p_value: float
    n: int
    alternative: str


#: Largest n enumerated exactly (2^20 sign patterns).
SIGN_FLIP_MAX_N = 20


def sign_flip_test(differences: Sequence[float], alternative: str = "two-sided") -> SignFlipResult:
    """Exact sign-flip test that paired differences are symmetric about 0 (mean statistic).

    Under the null each difference d_i is as likely to be +|d_i| as −|d_i|; all 2^n sign patterns
    are enumerated (`scipy.stats.permutation_test` with one sample and
    `permutation_type="samples"`, `n_resamples=inf`), so the p-value is exact.

    Args:
        differences: one difference per unit of replication (e.g. PIT − TT per seed), n ≤ 20.
        alternative: "two-sided", "greater" or "less".

    Raises:
        ValueError: fewer than 1 or more than `SIGN_FLIP_MAX_N` differences, a non-finite one, or
            an unknown alternative.
    """
    from scipy.stats import permutation_test

    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 1 or not 1 <= d.size <= SIGN_FLIP_MAX_N:
        raise ValueError(f"need 1 to {SIGN_FLIP_MAX_N} differences, got shape {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError("the differences must be finite")
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be two-sided, greater or less, got {alternative!r}")
    result = permutation_test(
        (d,), np.mean, permutation_type="samples", n_resamples=np.inf, alternative=alternative
    )
    smallest = (2.0 if alternative == "two-sided" else 1.0) / 2.0**d.size
    return SignFlipResult(float(d.mean()), float(result.pvalue), smallest, int(d.size), alternative)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control), in the input order.

    With the m p-values sorted ascending p_(1) ≤ … ≤ p_(m): adj_(j) = max_{i ≤ j} min(1,
    (m − i + 1) p_(i)). Reject hypothesis j at level α when adj_j ≤ α.

    Raises:
        ValueError: a p-value outside [0, 1].
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.size and (not np.isfinite(p).all() or p.min() < 0 or p.max() > 1):
        raise ValueError("p-values must lie in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[index]))
        adjusted[index] = running
    return adjusted.tolist()


@dataclass(frozen=True)
class MatchedLossComparison:
    """Two interfaces' effect compared at one base loss, through a line fitted to each.

    Attributes:
        at_loss: the base loss (nats/token) where both lines are read.
        effect_a: fitted effect of interface a at `at_loss` (the effect's unit).
        effect_b: the same for b.
        difference: effect_b − effect_a.
        slope_a, intercept_a, slope_b, intercept_b: the least-squares lines effect = slope ·
            loss + intercept.
        overlap: (low, high), the base losses both interfaces cover; `at_loss` defaults to its
            middle, and a reading outside it is an extrapolation.
    """

    at_loss: float
    effect_a: float
    effect_b: float
    difference: float
    slope_a: float
    intercept_a: float
    slope_b: float
    intercept_b: float
    overlap: tuple[float, float]


def matched_loss_comparison(
    loss_a: Sequence[float],
    effect_a: Sequence[float],
    loss_b: Sequence[float],
    effect_b: Sequence[float],
    at_loss: float | None = None,
) -> MatchedLossComparison:
    """Compare an effect (e.g. side-effect KL) of two interfaces at the same base loss.

    Each interface's effect is regressed on its bases' losses (ordinary least squares, one line
    per interface, every base, e.g. every checkpoint of every seed, one point), and both lines are
    read at `at_loss` (default: the middle of the loss range both cover), so that a base's
    distance to the optimum is not taken for the interface.

    Raises:
        ValueError: fewer than 2 points or mismatched lengths for an interface, a constant loss,
            or loss ranges that do not overlap (and no `at_loss` given).
    """
    lines = []
    for name, loss, effect in (("a", loss_a, effect_a), ("b", loss_b, effect_b)):
        x, y = np.asarray(loss, dtype=np.float64), np.asarray(effect, dtype=np.float64)
        if x.shape != y.shape or x.ndim != 1 or x.size < 2:
            raise ValueError(f"interface {name}: need >= 2 (loss, effect) pairs of equal length")
        if np.ptp(x) == 0:
            raise ValueError(f"interface {name}: all base losses are equal; a line needs two")
        slope, intercept = np.polyfit(x, y, 1)
        lines.append((float(slope), float(intercept), float(x.min()), float(x.max())))
    (sa, ia, lo_a, hi_a), (sb, ib, lo_b, hi_b) = lines
    overlap = (max(lo_a, lo_b), min(hi_a, hi_b))
    if at_loss is None:
        if overlap[0] > overlap[1]:
            raise ValueError(
                f"the base losses do not overlap ({lo_a:.3f}-{hi_a:.3f} vs {lo_b:.3f}-{hi_b:.3f}): "
                "give at_loss to extrapolate"
            )
        at_loss = 0.5 * (overlap[0] + overlap[1])
    ea, eb = sa * at_loss + ia, sb * at_loss + ib
    return MatchedLossComparison(float(at_loss), ea, eb, eb - ea, sa, ia, sb, ib, overlap)


def _sign_patterns(n: int) -> np.ndarray:
    """All 2^n sign vectors, (2^n, n) of ±1."""
    bits = (np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1
    return 1.0 - 2.0 * bits


def sign_flip_power(
    effect: float,
    sd: float,
    n: int,
    alpha: float = 0.05,
    alternative: str = "two-sided",
    simulations: int = 4000,
    seed: int = 0,
) -> float:
    """Power of the exact sign-flip test (`sign_flip_test`) at level `alpha`, by simulation.

    The n paired differences are drawn d_i ~ N(effect, sd²) (one per unit of replication);
    each simulated sample is tested exactly against all 2^n sign patterns, as
    `sign_flip_test` does, and the power is the fraction of samples with p ≤ alpha (Monte
    Carlo standard error ≤ 0.5/√simulations). With n units no p-value falls below 2/2^n
    (two-sided), so the power is 0 whenever alpha < 2/2^n, whatever the effect.

    Args:
        effect: the true mean difference (the unit of `sd`).
        sd: the standard deviation of one unit's difference (> 0).
        n: units, 1 to `SIGN_FLIP_MAX_N`.
        alpha: the test's level (after any multiplicity correction, e.g. alpha / m).

    Raises:
        ValueError: sd ≤ 0, n outside [1, SIGN_FLIP_MAX_N], alpha outside (0, 1), an unknown
            alternative, or fewer than 100 simulations.
    """
    if not sd > 0:
        raise ValueError(f"sd must be > 0, got {sd}")
    if not 1 <= n <= SIGN_FLIP_MAX_N:
        raise ValueError(f"n must be 1 to {SIGN_FLIP_MAX_N}, got {n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be two-sided, greater or less, got {alternative!r}")
    if simulations < 100:
        raise ValueError(f"need at least 100 simulations, got {simulations}")
    rng = np.random.default_rng(seed)
    patterns = _sign_patterns(n)  # (2^n, n)
    rejected = 0
    block = max(1, (1 << 22) // 2**n)  # simulated samples per block: ≤ 4M pattern means
    for start in range(0, simulations, block):
        d = rng.normal(effect, sd, size=(min(block, simulations - start), n))
        observed = d.mean(axis=1, keepdims=True)  # (s, 1)
        means = d @ patterns.T / n  # (s, 2^n): the mean under every sign pattern
        tol = 1e-12 * np.abs(d).sum(axis=1, keepdims=True)
        if alternative == "two-sided":
            extreme = np.abs(means) >= np.abs(observed) - tol
        elif alternative == "greater":
            extreme = means >= observed - tol
        else:
            extreme = means <= observed + tol
        p = extreme.mean(axis=1)
        rejected += int((p <= alpha).sum())
    return rejected / simulations


def units_for_power(
    effect: float,
    sd: float,
    power: float = 0.8,
    alpha: float = 0.05,
    alternative: str = "two-sided",
    max_n: int = SIGN_FLIP_MAX_N,
    simulations: int = 4000,
) -> int | None:
    """The fewest units n for which `sign_flip_power(effect, sd, n, alpha)` ≥ `power`, or None
    if even `max_n` units do not reach it."""
    for n in range(1, max_n + 1):
        smallest = (2.0 if alternative == "two-sided" else 1.0) / 2.0**n
        if smallest > alpha:
            continue
        if sign_flip_power(effect, sd, n, alpha, alternative, simulations) >= power:
            return n
    return None


def paired_unit_summary(differences: Sequence[float]) -> dict[str, Any]:
    """What a reader needs of paired differences, one per unit of replication (e.g. PIT − TT
    per seed): n, the differences, their mean, the exact two-sided sign-flip p (with the
    smallest p n units can give), the sd and the 95 % t-interval of the mean.

    Returns:
        {"n", "differences", "mean", "sign_flip": {"p", "smallest_possible_p"}, "sd", "t_crit",
        "ci95": [low, high]}; with n = 1 only n, differences and mean, with n = 0 only n and
        differences (no interval or test exists).

    Raises:
        ValueError: a non-finite difference.
    """
    from scipy import stats as st

    d = np.asarray(differences, dtype=np.float64)
    if not np.isfinite(d).all():
        raise ValueError("the differences must be finite")
    out: dict[str, Any] = {"n": int(d.size), "differences": d.tolist()}
    if d.size == 0:
        return out
    out["mean"] = float(d.mean())
    if d.size < 2:
        return out
    test = sign_flip_test(d)
    out["sign_flip"] = {"p": test.p_value, "smallest_possible_p": test.smallest_p_value}
    sd = float(d.std(ddof=1))
    t_crit = float(st.t.ppf(0.975, d.size - 1))
    half = t_crit * sd / math.sqrt(d.size)
    out.update(sd=sd, t_crit=t_crit, ci95=[out["mean"] - half, out["mean"] + half])
    return out
