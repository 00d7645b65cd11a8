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


def test_teacher_mode_from_a_decoder_run(small_corpus, tmp_path) -> None:
    """`model` may name a training run of our decoder: it is converted on its own interface
    (conversion.json, a step-0 KL row), trains with the run's tokenizer, resumes and reloads."""
    from tying.train.restore import load_trained

    teacher = tmp_path / "teacher"
    train(load_config(TrainConfig, None, small_run(small_corpus, teacher, tie="tt", max_steps=2)))
    run_dir = tmp_path / "student"
    settings = dict(
        model=teacher, tie="pit", max_steps=2, step0_tokens=256, tokenizer="gpt2", preset="mini"
    )
    overrides = [*small_run(small_corpus, run_dir, **settings), "pit.fit.tokens=256"]
    train(load_config(TrainConfig, None, overrides))
    report = json.loads((run_dir / "conversion.json").read_text())
    assert report["family"] == "interface-model" and report["t_init"] == "fit"
    step0 = read_metrics(run_dir)[0]
    assert step0["step"] == 0 and step0["step0_kl"] == pytest.approx(report["step0"]["kl"])
    assert 0 <= step0["step0_kl"] < 1
    # The run continues from its checkpoint, and loads for analysis with the teacher's tokenizer.
    train(load_config(TrainConfig, None, [*overrides, "max_steps=4", "resume=true"]))
    assert max(r["step"] for r in read_metrics(run_dir) if "loss" in r) == 4
    model, tokenizer, cfg, _ = load_trained(run_dir)
    assert type(model.interface).__name__ == "PseudoInverseTying" and tokenizer.vocab_size == 512
    assert cfg.model == str(teacher)
