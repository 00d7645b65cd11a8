"""studies/teacher_seeds.py: the paired TT-vs-PIT statistics over seeds, against hand-computed
values, on a synthetic layout of two experiment folders."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from studies import teacher_seeds as s

T_975_DF2 = 4.302652729911275  # Student t, 97.5% quantile, 2 degrees of freedom


def _run(folder: Path, val_loss: float, kl: float | None = None, steps: int = 4) -> None:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("tie: tt\n")
    rows = [
        {"step": s, "tokens": 8 * s, "loss": val_loss + 1 + 0.1 * (steps - s)}
        for s in range(1, steps + 1)
    ]
    rows += [
        {"step": steps // 2, "val_loss": val_loss + 0.5},
        {"step": steps, "val_loss": val_loss},
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "DONE.json").write_text(json.dumps({"result": {"elapsed_s": 12.0}}))
    if kl is not None:
        report = {"t_init": "fit", "step0": {"kl": kl, "loss": 7.1, "teacher_loss": 7.0}}
        (folder / "conversion.json").write_text(json.dumps(report))


def test_paper_range_is_table1() -> None:
    # PIT − TT of Table 1's teacher rows: 2.304 − 2.311, 3.714 − 3.523, 2.821 − 3.025.
    assert s.paper_range() == (-0.204, 0.191)


def test_three_differences_of_one_sign() -> None:
    out = s.paired_summary([0.1, 0.2, 0.3], (-0.204, 0.191))
    assert out["mean"] == pytest.approx(0.2)
    assert out["sd"] == pytest.approx(0.1)
    assert out["t_crit"] == pytest.approx(T_975_DF2)
    half = T_975_DF2 * 0.1 / math.sqrt(3)  # 0.24841
    assert out["ci95"] == pytest.approx([0.2 - half, 0.2 + half])
    # Only the observed sign pattern (of 8) reaches the mean: one-sided 1/8, two-sided 0.25,
    # which is also the smallest p 3 seeds can give.
    assert out["sign_flip"]["p"] == pytest.approx(0.25)
    assert out["sign_flip"]["smallest_possible_p"] == pytest.approx(0.25)
    assert out["verdict"] == "undecided"
    assert out["excluded_above"] == pytest.approx(0.2 + half)


def test_verdicts() -> None:
    # [0.05, −0.02, 0.01]: mean 0.01333, sd 0.035119, half-width 0.08724: inside the range.
    inside = s.paired_summary([0.05, -0.02, 0.01], (-0.204, 0.191))
    assert inside["ci95"] == pytest.approx([-0.07391, 0.10057], abs=1e-5)
    assert inside["verdict"] == "reproduced"
    # Sign sums ±0.05 ±0.02 ±0.01 at least the observed 0.04: 3 of 8, two-sided 2 × 3/8.
    assert inside["sign_flip"]["p"] == pytest.approx(0.75)
    above = s.paired_summary([0.5, 0.6, 0.7], (-0.204, 0.191))
    assert above["ci95"][0] > 0.191 and above["verdict"] == "contradicted"
    below = s.paired_summary([-0.5, -0.6, -0.7], (-0.204, 0.191))
    assert below["verdict"] == "contradicted"
    assert s.paired_summary([0.1], (-0.204, 0.191))["verdict"] == "undecided"


def test_analyse_pairs_seeds_and_adjusts(tmp_path) -> None:
    folders = {}
    for name, diffs in (("a", [0.1, 0.2, 0.3]), ("b", [0.05, -0.02, 0.01])):
        runs = tmp_path / name / "runs"
        for seed, d in enumerate(diffs):
            _run(runs / f"teacher-tt-s{seed}", 7.0 + seed, kl=0.0)
            _run(runs / f"teacher-pit-s{seed}", 7.0 + seed + d, kl=0.04 + seed / 100)
        folders[name] = tmp_path / name
    _run(folders["a"] / "runs" / "teacher-tt-s3", 7.0)  # its PIT run is missing: not paired
    data = s.analyse(folders)
    a, b = data["teachers"]["a"], data["teachers"]["b"]
    assert a["missing_seeds"] == [3] and [u["seed"] for u in a["units"]] == [0, 1, 2]
    assert [u["diff_val"] for u in a["units"]] == pytest.approx([0.1, 0.2, 0.3])
    assert [u["step0_kl_pit"] for u in b["units"]] == pytest.approx([0.04, 0.05, 0.06])
    assert b["step0_kl_pit"] == pytest.approx([0.04, 0.05, 0.06])
    assert a["units"][1]["tt"]["val_loss"] == pytest.approx(8.0)
    assert a["units"][0]["tt"]["val_loss_by_step"] == {"2": 7.5, "4": 7.0}
    # The mean training loss of the last steps differs by the same amount.
    assert a["units"][2]["diff_train_last"] == pytest.approx(0.3)
    # Holm over the two teachers: p = 0.25 and 0.75 -> 2 × 0.25 = 0.5, max(0.5, 0.75) = 0.75.
    assert a["val_loss"]["sign_flip"]["holm_p"] == pytest.approx(0.5)
    assert b["val_loss"]["sign_flip"]["holm_p"] == pytest.approx(0.75)
    assert (a["val_loss"]["verdict"], b["val_loss"]["verdict"]) == ("undecided", "reproduced")
    assert data["paper"]["range"] == [-0.204, 0.191]
    timing = a["timing"][str(folders["a"])]
    assert len(timing["cells"]) == 7 and timing["total_s"] >= 0
    table = s.markdown(data)
    assert "| seed 0 | 0.040 | 7.000 | 7.100 | +0.100 |" in table
    assert "| 3 | +0.200 | -0.048 to +0.448 | 0.25 (0.50) | undecided" in table


def test_the_trainable_z_cells_are_paired_with_tt_and_frozen_pit(tmp_path) -> None:
    runs = tmp_path / "t" / "runs"
    for seed, (pit, pit_z) in enumerate([(7.3, 7.1), (7.4, 7.15), (7.5, 7.2)]):
        _run(runs / f"teacher-tt-s{seed}", 7.0, kl=0.0)
        _run(runs / f"teacher-pit-s{seed}", pit, kl=0.05)
        if seed < 2:  # seed 2's Z-trained run has not finished: left out, not paired
            _run(runs / f"teacher-pit-z-s{seed}", pit_z, kl=0.05)
    block = s.analyse({"t": tmp_path / "t"})["teachers"]["t"]
    z = block["trainable_z"]
    assert [r["seed"] for r in z["units"]] == [0, 1]
    assert z["minus_tt"]["differences"] == pytest.approx([0.1, 0.15])
    assert z["minus_frozen"]["differences"] == pytest.approx([-0.2, -0.25])
    # n = 2: mean −0.225, sd 0.035355, t(0.975, 1) = 12.706: half-width 0.31766.
    assert z["minus_frozen"]["ci95"] == pytest.approx(
        [-0.225 - 0.31766, -0.225 + 0.31766], abs=1e-4
    )
    assert "verdict" not in z["minus_frozen"]  # an ablation: no verdict against the paper
    # The frozen-Z comparison with TT is unchanged by the extra cells.
    assert [u["diff_val"] for u in block["units"]] == pytest.approx([0.3, 0.4, 0.5])
    assert "| seed 0 | 0.050 | 7.100 | +0.100 | -0.200 |" in s.markdown(
        s.analyse({"t": tmp_path / "t"})
    )


def test_a_teacher_read_from_two_folders(tmp_path) -> None:
    """Seeds from the first folder that has them; pit-z from the second; a seed finished in both
    must agree, else the folders are not one experiment."""
    first, second = tmp_path / "first", tmp_path / "second"
    for seed in range(4):  # the 4-seed grid of TT and PIT
        _run(first / "runs" / f"teacher-tt-s{seed}", 7.0, kl=0.0)
        _run(first / "runs" / f"teacher-pit-s{seed}", 7.2 + seed / 100, kl=0.05)
    for seed in range(2):  # the 2-seed grid with the ablation: the same TT and PIT runs
        _run(second / "runs" / f"teacher-tt-s{seed}", 7.0, kl=0.0)
        _run(second / "runs" / f"teacher-pit-s{seed}", 7.2 + seed / 100, kl=0.05)
        _run(second / "runs" / f"teacher-pit-z-s{seed}", 6.9, kl=0.05)
    block = s.analyse({"t": [first, second]})["teachers"]["t"]
    assert [u["seed"] for u in block["units"]] == [0, 1, 2, 3]
    assert block["val_loss"]["differences"] == pytest.approx([0.2, 0.21, 0.22, 0.23])
    assert [r["seed"] for r in block["trainable_z"]["units"]] == [0, 1]
    assert block["folders"] == [str(first), str(second)]
    (second / "runs" / "teacher-pit-s1" / "metrics.jsonl").write_text(
        json.dumps({"step": 4, "loss": 8.0})
        + "\n"
        + json.dumps({"step": 4, "val_loss": 7.5})
        + "\n"
    )
    with pytest.raises(ValueError, match="teacher-pit-s1: final validation loss .* not the same"):
        s.analyse({"t": [first, second]})
