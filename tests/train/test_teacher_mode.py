"""Teacher mode: train a converted Hugging Face model, then export the run to plain transformers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tying.config import load_config
from tying.train import train
from tying.train.config import TrainConfig
from tying.train.metrics import read_metrics

from .conftest import small_run


@pytest.mark.parametrize("tie", ["tt", "pit"])
def test_teacher_run_trains_and_exports(small_corpus, tiny_teacher, tmp_path, tie) -> None:
    run_dir = tmp_path / "run"
    overrides = small_run(
        small_corpus, run_dir, model=tiny_teacher, tie=tie, max_steps=4, track_gradient_paths=True
    )
    result = train(load_config(TrainConfig, None, overrides))
    rows = [r for r in read_metrics(run_dir) if "loss" in r]
    assert len(rows) == 4 and rows[-1]["loss"] < rows[0]["loss"]
    assert "grad_out_share" in rows[0]
    out = tmp_path / "exported"
    subprocess.run(
        [sys.executable, "-m", "tying", "export", str(run_dir), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    # Plain transformers, without tying importable, reproduces the trained model's logits.
    probe = (
        "import sys, json, torch; sys.modules['tying'] = None\n"
        "from transformers import AutoModelForCausalLM\n"
        f"m = AutoModelForCausalLM.from_pretrained({str(out)!r}).eval()\n"
        "ids = torch.arange(0, 40).reshape(2, 20)\n"
        "print(json.dumps(m(input_ids=ids).logits.tolist()))\n"
    )
    plain = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    )
    exported_logits = torch.tensor(json.loads(plain.stdout))
    from tying.train.restore import load_trained

    model, *_ = load_trained(run_dir)
    with torch.no_grad():
        ours = model(torch.arange(0, 40).reshape(2, 20))
    torch.testing.assert_close(exported_logits, ours, rtol=1e-4, atol=1e-4)
    assert result.steps == 4
