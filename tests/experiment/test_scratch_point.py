"""studies/scratch_point.py: runs cut at different steps are compared at their last common
validation (equal tokens), with hand-computed differences, on synthetic metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studies import scratch_point as script

TOKENS_PER_STEP = 64


def _run(folder: Path, steps: int, offset: float) -> None:
    """A run cut at `steps`: training loss 10 − step/10 + offset, validation every 5 steps at
    the training loss + 0.25 (tokens_per_s rising, so the median is known)."""
    folder.mkdir(parents=True)
    rows = []
    for s in range(1, steps + 1):
        rows.append(
            {
                "step": s,
                "tokens": s * TOKENS_PER_STEP,  # trained so far, as metrics.jsonl counts them
                "loss": 10 - s / 10 + offset,
                "lr": 1e-3,
                "tokens_per_s": 100.0 * s,
            }
        )
        if s % 5 == 0:
            rows.append(
                {"step": s, "tokens": s * TOKENS_PER_STEP, "val_loss": 10 - s / 10 + offset + 0.25}
            )
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_runs_are_compared_at_their_last_common_validation(tmp_path: Path) -> None:
    _run(tmp_path / "scratch-tt-s0", steps=20, offset=0.0)
    _run(tmp_path / "scratch-pit-s0", steps=12, offset=0.5)  # cut first: validations 5, 10
    _run(tmp_path / "scratch-pit-paper-s0", steps=20, offset=2.0)
    result = script.analyze(tmp_path)
    compared = result["last_common_validation"]
    assert compared["step"] == 10 and compared["tokens"] == 10 * TOKENS_PER_STEP
    assert compared["tt"]["val_loss"] == pytest.approx(9.25)
    # training loss: the mean of steps 1..10 = 10 - 5.5/10
    assert compared["tt"]["train_loss_mean_last_10"] == pytest.approx(9.45)
    assert compared["pit_minus_tt"]["val_loss"] == pytest.approx(0.5)
    assert compared["pit-paper_minus_tt"]["train_loss_mean_last_10"] == pytest.approx(2.0)
    # TT against the paper's recipe at every validation both reached (5, 10, 15, 20)
    assert result["pit_paper_minus_tt_val_by_step"] == pytest.approx(
        {5: 2.0, 10: 2.0, 15: 2.0, 20: 2.0}
    )
    assert result["runs"]["pit"]["steps"] == 12
    assert result["runs"]["tt"]["tokens_per_s_median"] == pytest.approx(1100.0)  # steps 2..20


def test_runs_without_a_common_validation_are_refused(tmp_path: Path) -> None:
    _run(tmp_path / "scratch-tt-s0", steps=20, offset=0.0)
    _run(tmp_path / "scratch-pit-s0", steps=4, offset=0.5)  # no validation yet
    _run(tmp_path / "scratch-pit-paper-s0", steps=20, offset=2.0)
    with pytest.raises(ValueError, match="share no validation step"):
        script.analyze(tmp_path)
