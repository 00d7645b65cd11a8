"""Distillation healing in `tying train`: the objective, its logging, and exact resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tying.config import ConfigError, load_config
from tying.hf import HFCausalLM, convert, load
from tying.train import checkpoint as ckpt
from tying.train import train
from tying.train.config import TrainConfig
from tying.train.distill import DistillationObjective, DistillConfig, load_teacher
from tying.train.metrics import read_metrics

from .conftest import small_run


def teacher_run(corpus, out_dir, teacher, **overrides) -> list[str]:
    """A teacher-mode PIT run with distillation from the model before conversion."""
    base = {
        "model": teacher,
        "tie": "pit",
        "pit.t_init": "output",  # closed form: keeps these runs seconds long
        "distill.teacher": "initial",
        "distill.alpha": 0.5,
        "distill.temperature": 2.0,
        "step0_tokens": 256,
    }
    base.update(overrides)
    return small_run(corpus, out_dir, **base)


def test_student_equal_to_teacher_gives_zero_kl_and_zero_gradient(tiny_teacher) -> None:
    def loaded():
        model, _ = load(tiny_teacher)
        convert(model, "tt")
        return HFCausalLM(model).double()

    student, teacher = loaded(), loaded().eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    objective = DistillationObjective(student, teacher, 1.0, 2.0, teacher_autocast=False).train()
    x = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    y = torch.roll(x, -1, dims=1)
    loss, ce, kl = objective(x, y)
    assert abs(float(kl)) < 1e-12 and abs(float(loss.detach())) < 1e-12
    assert float(ce) > 1.0  # the cross-entropy is still measured
    loss.backward()
    grads = [p.grad for p in student.parameters() if p.grad is not None]
    assert grads and max(float(g.abs().max()) for g in grads) < 1e-12
    assert all(p.grad is None for p in teacher.parameters())


def test_distillation_loss_through_the_objective_matches_full_logits(tiny_teacher) -> None:
    student_hf, _ = load(tiny_teacher)
    convert(student_hf, "pit", t_init="output")
    student = HFCausalLM(student_hf).train()
    teacher = load_teacher(DistillConfig(teacher=str(tiny_teacher)), None)
    objective = DistillationObjective(student, teacher, 0.3, 1.5, teacher_autocast=False).train()
    x = torch.randint(0, 512, (2, 12), generator=torch.Generator().manual_seed(1))
    y = torch.roll(x, -1, dims=1)
    y[0, -1] = -100
    loss, ce, kl = objective(x, y)
    with torch.no_grad():
        s = student(x).flatten(0, 1)
        t = teacher(x).flatten(0, 1)
    m = y.flatten() != -100
    ref_ce = torch.nn.functional.cross_entropy(s[m], y.flatten()[m])
    ref_kl = torch.nn.functional.kl_div(
        torch.log_softmax(s[m] / 1.5, -1),
        torch.log_softmax(t[m] / 1.5, -1),
        log_target=True,
        reduction="batchmean",
    )
    assert float(ce) == pytest.approx(float(ref_ce), rel=1e-5)
    assert float(kl) == pytest.approx(float(ref_kl), rel=1e-4)
    assert float(loss.detach()) == pytest.approx(
        0.7 * float(ref_ce) + 0.3 * 1.5**2 * float(ref_kl), rel=1e-4
    )
    assert all(not p.requires_grad for p in teacher.parameters())
    assert not any(n.startswith("_teacher") for n, _ in objective.named_parameters())


def test_distill_run_logs_ce_and_kl_and_keeps_the_teacher_out(
    small_corpus, tiny_teacher, tmp_path
) -> None:
    run_dir = tmp_path / "run"
    cfg = load_config(TrainConfig, None, teacher_run(small_corpus, run_dir, tiny_teacher))
    assert cfg.distill == DistillConfig(teacher="initial", alpha=0.5, temperature=2.0)
    train(cfg)
    rows = read_metrics(run_dir)
    steps = [r for r in rows if "loss" in r]
    assert len(steps) == 6
    for r in steps:
        assert r["loss"] == pytest.approx(0.5 * r["ce"] + 0.5 * 4.0 * r["kl"], rel=1e-5)
    step0 = [r for r in rows if "step0_kl" in r]
    assert len(step0) == 1 and step0[0]["step"] == 0 and step0[0]["step0_kl"] > 0
    report = json.loads((run_dir / "conversion.json").read_text())
    assert report["t_init"] == "output" and report["step0"]["kl"] == step0[0]["step0_kl"]
    # checkpoints hold the student alone, under its own parameter names
    model_state, _, _ = ckpt.load_checkpoint(ckpt.latest_checkpoint(run_dir))
    plain = load_config(TrainConfig, None, teacher_run(small_corpus, tmp_path / "x", tiny_teacher))
    from tying.train.build import build_model

    assert set(model_state) == set(build_model(plain, 512).state_dict())
    assert "distill:" in (run_dir / "config.yaml").read_text()


def test_distill_config_errors(small_corpus, tmp_path) -> None:
    with pytest.raises(ConfigError, match="alpha"):
        load_config(TrainConfig, None, ["distill.alpha=1.5"])
    with pytest.raises(ConfigError, match="temperature"):
        load_config(TrainConfig, None, ["distill.temperature=0"])
    with pytest.raises(
        ConfigError, match="unknown key 'distill.alfa' in config; did you mean 'distill.alpha'"
    ):
        load_config(TrainConfig, None, ["distill.alfa=0.5"])
    cfg = load_config(
        TrainConfig, None, small_run(small_corpus, tmp_path / "s", **{"distill.teacher": "initial"})
    )
    with pytest.raises(ConfigError, match="teacher mode"):
        train(cfg)


def _start(args):
    return subprocess.Popen(
        [sys.executable, "-m", "tying", "train", *args],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _losses(run_dir) -> dict[int, tuple[float, float, float]]:
    return {
        r["step"]: (r["loss"], r["ce"], r["kl"])
        for r in read_metrics(run_dir)
        if "loss" in r and "event" not in r
    }


@pytest.mark.slow
def test_killed_distillation_run_resumes_exactly(small_corpus, tiny_teacher, tmp_path) -> None:
    steps = 10
    ref_dir, killed_dir = tmp_path / "ref", tmp_path / "killed"
    args = {"max_steps": steps, "pit.trainable_z": True}
    ref = _start(teacher_run(small_corpus, ref_dir, tiny_teacher, **args))
    assert ref.wait(timeout=600) == 0, ref.stdout.read()
    reference = _losses(ref_dir)

    proc = _start(teacher_run(small_corpus, killed_dir, tiny_teacher, **args))
    deadline = time.time() + 600
    while time.time() < deadline:
        done = list(_losses(killed_dir)) if (killed_dir / "metrics.jsonl").exists() else []
        if done and max(done) >= 5:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    last = ckpt.latest_checkpoint(killed_dir)
    assert last is not None
    resumed_from = json.loads((last / "trainer.json").read_text())["step"]
    assert 0 < resumed_from < steps, "the run finished before it was killed; nothing was tested"
    again = _start(teacher_run(small_corpus, killed_dir, tiny_teacher, resume=True, **args))
    assert again.wait(timeout=600) == 0, again.stdout.read()
    resumed = _losses(killed_dir)
    assert sorted(resumed) == list(range(1, steps + 1))
    for step in range(resumed_from + 1, steps + 1):
        assert resumed[step] == reference[step], (step, resumed[step], reference[step])
