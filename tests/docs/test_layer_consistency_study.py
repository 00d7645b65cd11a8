"""studies.layer_consistency: per-seed PIT − TT units from the measured runs of a grid, and
the last validation loss of each run read from its metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studies import ROOT
from studies import layer_consistency as study

CONFIG = str(ROOT / "configs" / "experiments" / "layer_consistency.yaml")


def test_final_val_loss_is_the_last_validation_row(tmp_path: Path) -> None:
    rows = [{"step": 1, "loss": 9.0}, {"step": 65, "val_loss": 7.5}, {"step": 66, "loss": 7.0}]
    rows.append({"step": 130, "val_loss": 6.25})
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert study.final_val_loss(tmp_path) == 6.25
    assert study.final_val_loss(tmp_path / "missing") is None


def test_units_pair_the_seeds_of_a_partial_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """seeds=[0,1] measures 4 runs; each unit is PIT − TT of its own seed."""
    fake = {("tt", 0): 0.5, ("pit", 0): 0.25, ("tt", 1): 0.4, ("pit", 1): 0.45}
    seen = []

    def measure(run_dir: Path, tokens: int, k: int, seq_len: int) -> dict:
        label, seed = run_dir.name.split("-")[1], int(run_dir.name.rsplit("-s", 1)[1])
        seen.append((label, seed, tokens, k, seq_len))
        return {"consistency": fake[(label, seed)], "val_loss": None}

    monkeypatch.setattr(study, "measure_run", measure)
    out = tmp_path / "lc.json"
    result = study.main([CONFIG, "seeds=[0,1]", "--tokens", "512", "--out", str(out)])
    assert sorted(seen) == sorted((lab, s, 512, 10, 256) for lab, s in fake)
    assert [u["seed"] for u in result["units"]] == [0, 1]
    assert result["differences"] == pytest.approx([0.25 - 0.5, 0.45 - 0.4])
    assert result["pit_ahead"] == 1
    assert json.loads(out.read_text())["differences"] == result["differences"]
