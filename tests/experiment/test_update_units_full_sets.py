"""studies/update_units_full_sets.py: the item-sampling standard error of a subset's change of
reference log-likelihood per token, against a hand computation."""

from __future__ import annotations

import math

import pytest

from studies import update_units_full_sets


def _pair(before: list[float], after: list[float], tokens: list[int]) -> dict:
    def results(logliks: list[float]) -> dict:
        items = [{"ref_loglik": v, "ref_tokens": t} for v, t in zip(logliks, tokens, strict=True)]
        return {"tasks": {"gsm8k": {"items": items}}}

    return {"base": results(before), "updated": results(after)}


def test_gain_standard_error_by_hand() -> None:
    # changes 2, 3, 3 nats over 2, 4, 6 tokens: ratio r = 8/12; residuals 2 - 4/3, 3 - 8/3,
    # 3 - 4 (squares 4/9, 1/9, 1: 14/9); n/(n-1) = 3/2; over 12^2; times 1 - 3/6 for N = 6.
    pair = _pair([-10.0, -20.0, -30.0], [-8.0, -17.0, -27.0], [2, 4, 6])
    se = update_units_full_sets.gain_standard_error(pair, "gsm8k", 6)
    assert se == pytest.approx(math.sqrt(1.5 * (14 / 9) / 144 * 0.5), rel=1e-12)


def test_gain_standard_error_is_zero_for_the_whole_set_or_a_constant_change() -> None:
    pair = _pair([-10.0, -20.0, -30.0], [-8.0, -17.0, -27.0], [2, 4, 6])
    assert (
        update_units_full_sets.gain_standard_error(pair, "gsm8k", 3) == 0.0
    )  # every item: no sampling error
    same_rate = _pair([-10.0, -20.0], [-9.0, -18.0], [2, 4])  # 0.5 nat/token on both items
    assert update_units_full_sets.gain_standard_error(same_rate, "gsm8k", 100) == pytest.approx(
        0.0, abs=1e-15
    )
