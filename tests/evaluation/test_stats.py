"""Wilson interval, exact McNemar test and paired bootstrap against hand arithmetic and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from tying.evaluation.stats import (
    holm,
    matched_loss_comparison,
    mcnemar_exact,
    paired_bootstrap,
    sign_flip_power,
    sign_flip_test,
    units_for_power,
    wilson_interval,
)

Z95 = 1.959963984540054  # Φ⁻¹(0.975)


def test_wilson_by_hand_8_of_10():
    # p̂ = 0.8, z² = 3.841459, 1 + z²/n = 1.3841459
    # center = (0.8 + 3.841459/20) / 1.3841459 = 0.99207295 / 1.3841459 = 0.7167397
    # half = z/1.3841459 · sqrt(0.8·0.2/10 + 3.841459/400) = 1.4160164 · 0.1600114 = 0.2265788
    z2 = Z95**2
    center = (0.8 + z2 / 20) / (1 + z2 / 10)
    half = Z95 / (1 + z2 / 10) * math.sqrt(0.016 + z2 / 400)
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(center - half, abs=1e-12)
    assert high == pytest.approx(center + half, abs=1e-12)
    assert (low, high) == pytest.approx((0.4901625, 0.9433178), abs=1e-7)


def test_wilson_zero_successes_has_a_closed_form():
    # p̂ = 0: low = 0, high = z²/(n + z²) = 3.841459/13.841459 = 0.2775328
    low, high = wilson_interval(0, 10)
    assert low == 0.0
    assert high == pytest.approx(Z95**2 / (10 + Z95**2), abs=1e-12)
    assert wilson_interval(10, 10) == pytest.approx((1 - high, 1.0), abs=1e-12)


@pytest.mark.parametrize("n", [1, 7, 50, 1319])
@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99])
def test_wilson_matches_scipy_and_is_symmetric(n, confidence):
    for successes in sorted({0, 1, n // 3, n // 2, n - 1, n}):
        low, high = wilson_interval(successes, n, confidence)
        reference = binomtest(successes, n).proportion_ci(confidence, method="wilson")
        assert (low, high) == pytest.approx((reference.low, reference.high), abs=1e-12)
        assert low <= successes / n <= high
        mirror = wilson_interval(n - successes, n, confidence)
        assert (low, high) == pytest.approx((1 - mirror[1], 1 - mirror[0]), abs=1e-12)


def test_wilson_widens_with_confidence_and_narrows_with_n():
    assert np.diff(wilson_interval(30, 100, 0.99)) > np.diff(wilson_interval(30, 100, 0.9))
    assert np.diff(wilson_interval(300, 1000)) < np.diff(wilson_interval(30, 100))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, 0), "n >= 1"),
        ((5, 4), r"\[0, 4\]"),
        ((-1, 4), "successes"),
        ((1, 4, 1.0), "confidence"),
    ],
)
def test_wilson_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        wilson_interval(*args)


def _pairs(only_a: int, only_b: int, both: int = 0, neither: int = 0):
    a = [True] * only_a + [False] * only_b + [True] * both + [False] * neither
    b = [False] * only_a + [True] * only_b + [True] * both + [False] * neither
    return a, b


@pytest.mark.parametrize(
    ("only_a", "only_b", "p"),
    [
        (0, 0, 1.0),  # no discordant item
        (1, 0, 1.0),  # 2 · P[X <= 0], X ~ Bin(1, 1/2) = 2 · 1/2 = 1
        (5, 0, 2 / 32),  # 2 · 1/2^5 = 0.0625
        (10, 2, 2 * (1 + 12 + 66) / 4096),  # 2 · (C(12,0) + C(12,1) + C(12,2)) / 2^12
        (3, 3, 1.0),  # 2 · P[X <= 3], X ~ Bin(6, 1/2) = 2 · 42/64 > 1 -> 1
    ],
)
def test_mcnemar_by_hand(only_a, only_b, p):
    result = mcnemar_exact(*_pairs(only_a, only_b, both=4, neither=3))
    assert (result.only_a, result.only_b, result.n) == (only_a, only_b, only_a + only_b + 7)
    assert result.p_value == pytest.approx(p, rel=1e-15)


def test_mcnemar_matches_scipy_binomtest():
    for only_a in range(0, 30, 3):
        for only_b in range(0, 30, 4):
            if only_a + only_b == 0:
                continue
            p = mcnemar_exact(*_pairs(only_a, only_b)).p_value
            reference = binomtest(only_a, only_a + only_b, 0.5).pvalue
            assert p == pytest.approx(reference, rel=1e-9)


def test_mcnemar_is_symmetric_and_ignores_concordant_items():
    a, b = _pairs(7, 2)
    forward, backward = mcnemar_exact(a, b), mcnemar_exact(b, a)
    assert (backward.only_a, backward.only_b) == (forward.only_b, forward.only_a)
    assert backward.p_value == forward.p_value
    a2, b2 = _pairs(7, 2, both=50, neither=80)
    assert mcnemar_exact(a2, b2).p_value == forward.p_value


def test_mcnemar_accepts_0_1_and_numpy_bools():
    a = np.array([1, 1, 0, 1], dtype=bool)
    assert mcnemar_exact(a, [0, 1, 0, 0]) == mcnemar_exact(
        [1, 1, 0, 1], [False, True, False, False]
    )


def test_mcnemar_bad_input():
    with pytest.raises(ValueError, match="same items"):
        mcnemar_exact([True], [True, False])
    with pytest.raises(ValueError, match="booleans"):
        mcnemar_exact([0.5], [True])
    with pytest.raises(ValueError, match="booleans"):
        mcnemar_exact([2], [True])


def _naive_bootstrap(a, b, n_resamples, seed, confidence):
    """Reference: the same draws as the library (blocks of 1,000), means by plain Python sums."""
    d = [y - x for x, y in zip(a, b)]
    n = len(d)
    rng = np.random.default_rng(seed)
    means = []
    while len(means) < n_resamples:
        rows = min(1000, n_resamples - len(means))
        for row in rng.integers(0, n, size=(rows, n)):
            means.append(math.fsum(d[i] for i in row) / n)
    observed = math.fsum(d) / n
    alpha = 1 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    extreme = sum(abs(m - observed) >= abs(observed) for m in means)
    return observed, low, high, (1 + extreme) / (1 + n_resamples)


def test_bootstrap_matches_a_naive_implementation():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2, size=37).astype(float)
    b = rng.integers(0, 2, size=37).astype(float)
    result = paired_bootstrap(a, b, n_resamples=2500, seed=11, confidence=0.9)
    observed, low, high, p = _naive_bootstrap(a, b, 2500, 11, 0.9)
    assert result.mean_difference == pytest.approx(observed, abs=1e-12)
    assert (result.ci_low, result.ci_high) == pytest.approx((low, high), abs=1e-12)
    assert result.p_value == pytest.approx(p, abs=1e-12)
    assert (result.n, result.n_resamples, result.confidence) == (37, 2500, 0.9)


def test_bootstrap_degenerate_cases():
    same = paired_bootstrap([0.1, 0.7, 0.3], [0.1, 0.7, 0.3], n_resamples=200)
    assert (same.mean_difference, same.ci_low, same.ci_high, same.p_value) == (0, 0, 0, 1)
    shifted = paired_bootstrap([0.0, 1.0, 2.0, 3.0], [0.5, 1.5, 2.5, 3.5], n_resamples=200)
    assert shifted.mean_difference == 0.5
    assert (shifted.ci_low, shifted.ci_high) == pytest.approx((0.5, 0.5), abs=1e-15)
    assert shifted.p_value == 1 / 201  # no resample is as far from 0.5 as 0.5 is from 0


def test_bootstrap_is_deterministic_and_antisymmetric():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=200), rng.normal(0.2, 1.0, size=200)
    first, again = paired_bootstrap(a, b, seed=5), paired_bootstrap(a, b, seed=5)
    assert first == again
    assert paired_bootstrap(a, b, seed=6).ci_low != first.ci_low
    swapped = paired_bootstrap(b, a, seed=5)
    assert swapped.mean_difference == pytest.approx(-first.mean_difference, abs=1e-15)
    assert (swapped.ci_low, swapped.ci_high) == pytest.approx(
        (-first.ci_high, -first.ci_low), abs=1e-12
    )
    assert swapped.p_value == first.p_value


def test_bootstrap_interval_is_near_the_normal_one_for_many_items():
    rng = np.random.default_rng(1)
    d = rng.normal(0.3, 2.0, size=4000)
    result = paired_bootstrap(np.zeros_like(d), d, n_resamples=4000, seed=2)
    se = d.std(ddof=1) / math.sqrt(d.size)  # 2/sqrt(4000) = 0.0316
    assert result.ci_low == pytest.approx(d.mean() - Z95 * se, abs=0.2 * se)
    assert result.ci_high == pytest.approx(d.mean() + Z95 * se, abs=0.2 * se)
    assert result.p_value < 1e-3  # mean 0.3 is ~9.5 standard errors from 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"a": [1.0], "b": [1.0, 2.0]}, "same items"),
        ({"a": [], "b": []}, "at least one item"),
        ({"a": [float("nan")], "b": [1.0]}, "finite"),
        ({"a": [1.0], "b": [1.0], "n_resamples": 0}, "n_resamples"),
        ({"a": [1.0], "b": [1.0], "confidence": 0.0}, "confidence"),
    ],
)
def test_bootstrap_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        paired_bootstrap(**kwargs)


# --------------------------------------------------------- units of replication (issue 26)


def test_sign_flip_test_against_hand_counted_patterns() -> None:
    # [1, 2, 3]: of the 8 sign patterns only +++ and --- have |mean| >= 2
    r = sign_flip_test([1.0, 2.0, 3.0])
    assert r.p_value == pytest.approx(2 / 8) and r.mean_difference == pytest.approx(2.0)
    # one-sided: only the observed pattern and the one flipping -0.5 reach a mean >= 1.9
    r = sign_flip_test([1.0, 2.0, 3.0, -0.5, 4.0], alternative="greater")
    assert r.p_value == pytest.approx(2 / 32)
    assert r.smallest_p_value == pytest.approx(1 / 32)
    # eight units can never go below 2/256 two-sided, however large the effect
    r = sign_flip_test([5.0] * 8)
    assert r.p_value == pytest.approx(2 / 256) == r.smallest_p_value
    with pytest.raises(ValueError, match="1 to 20"):
        sign_flip_test([])
    with pytest.raises(ValueError, match="alternative"):
        sign_flip_test([1.0], alternative="bigger")


def test_holm_step_down_by_hand() -> None:
    # sorted 0.01, 0.03, 0.04, 0.20 -> 4·0.01, max(.., 3·0.03), max(.., 2·0.04), max(.., 1·0.20)
    assert holm([0.01, 0.04, 0.03, 0.20]) == pytest.approx([0.04, 0.09, 0.09, 0.20])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([]) == []
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([1.5])


def test_matched_loss_comparison_reads_both_lines_at_one_loss() -> None:
    # a: effect = 2·loss + 1 at 3, 4, 5; b: effect = 2·loss + 0.5 at 3.5, 4.5, 5.5.
    # Overlap 3.5-5, read at 4.25: a 9.5, b 9.0. A raw mean would compare 9.0 with 9.5 the other
    # way round only because b's bases sit at higher losses.
    r = matched_loss_comparison([3, 4, 5], [7, 9, 11], [3.5, 4.5, 5.5], [7.5, 9.5, 11.5])
    assert r.at_loss == pytest.approx(4.25) and r.overlap == pytest.approx((3.5, 5.0))
    assert (r.effect_a, r.effect_b) == pytest.approx((9.5, 9.0))
    assert r.difference == pytest.approx(-0.5)
    assert (r.slope_a, r.intercept_a, r.slope_b, r.intercept_b) == pytest.approx((2, 1, 2, 0.5))
    with pytest.raises(ValueError, match="do not overlap"):
        matched_loss_comparison([1, 2], [0, 0], [3, 4], [0, 0])
    with pytest.raises(ValueError, match="all base losses are equal"):
        matched_loss_comparison([1, 1], [0, 1], [3, 4], [0, 0])


def test_sign_flip_power_against_the_closed_form_at_six_units() -> None:
    """With 6 units, two-sided, alpha 0.05, only the two all-same-sign patterns reach p ≤ 0.05
    (p = 2/64; one flipped sign already gives p ≥ 4/64), so the power is Φ(δ/σ)^6 + Φ(−δ/σ)^6."""
    from statistics import NormalDist

    up = NormalDist().cdf(1.0)
    expected = up**6 + (1 - up) ** 6  # 0.3546
    got = sign_flip_power(effect=0.5, sd=0.5, n=6, alpha=0.05, simulations=20000)
    assert got == pytest.approx(expected, abs=0.015)
    # the simulated p-values are sign_flip_test's own: one sample, tested both ways
    rng = np.random.default_rng(1)
    d = rng.normal(0.3, 1.0, size=7)
    assert sign_flip_test(d).p_value == pytest.approx(
        (np.abs(d @ _patterns(7).T / 7) >= abs(d.mean()) - 1e-12).mean()
    )


def _patterns(n: int) -> np.ndarray:
    return np.array([[1.0 if (k >> i) & 1 == 0 else -1.0 for i in range(n)] for k in range(2**n)])


def test_sign_flip_power_floor_and_units_for_power() -> None:
    # 5 units cannot reach p ≤ 0.05 two-sided (2/32 = 0.0625): power 0 whatever the effect
    assert sign_flip_power(effect=10.0, sd=1.0, n=5, alpha=0.05) == 0.0
    # a huge effect: 6 units suffice (all signs agree almost surely)
    assert units_for_power(effect=10.0, sd=1.0) == 6
    # Holm over 4 tests puts the first at 0.0125: 2/2^n ≤ 0.0125 needs n ≥ 8
    assert units_for_power(effect=10.0, sd=1.0, alpha=0.05 / 4) == 8
    # no effect: the power is the level at most (about alpha), never 0.8
    assert units_for_power(effect=0.0, sd=1.0, max_n=10, simulations=500) is None
    with pytest.raises(ValueError, match="sd"):
        sign_flip_power(effect=1.0, sd=0.0, n=6)
