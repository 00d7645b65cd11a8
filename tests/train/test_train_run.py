"""End-to-end training runs: metrics, validation, checkpoints, exact resume, divergence, eval."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tying.cli import main
from tying.config import ConfigError, load_config
from tying.train import DivergenceError, train
from tying.train import checkpoint as ckpt
from tying.train.config import TrainConfig
from tying.train.metrics import read_metrics

from .conftest import small_run


def _losses(run_dir) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run_dir) if "loss" in r and "event" not in r}


@pytest.mark.parametrize("tie", ["untied", "tt", "pit"])
def test_short_run_writes_metrics_checkpoints_and_learns(small_corpus, tmp_path, tie) -> None:
    out = tmp_path / tie
    cfg = load_config(TrainConfig, None, small_run(small_corpus, out, tie=tie, max_steps=8))
    result = train(cfg)
    rows = read_metrics(out)
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == list(range(1, 9))
    for key in ("step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"):
        assert key in steps[0]
    assert steps[-1]["tokens"] == 8 * 256
    val = [r for r in rows if "val_loss" in r]
    assert [r["step"] for r in val] == [3, 6, 8]
    assert val[-1]["val_ppl"] == pytest.approx(
        torch.tensor(val[-1]["val_loss"]).exp().item(), rel=1e-6
    )
    assert steps[-1]["loss"] < steps[0]["loss"] - 0.5
    assert result.val_loss == val[-1]["val_loss"]
    assert (out / "config.yaml").is_file()
    assert [p.name for p in ckpt.list_checkpoints(out)] == ["step-0000006", "step-0000008"]


def test_refuses_to_overwrite_an_existing_run(small_corpus, tmp_path) -> None:
    cfg = load_config(TrainConfig, None, small_run(small_corpus, tmp_path, max_steps=2))
    train(cfg)
    with pytest.raises(ConfigError, match="already holds a run .*: pass resume=true"):
        train(cfg)


def _start(args, env=None, verb: str = "train"):
    return subprocess.Popen(
        [sys.executable, "-m", "tying", verb, *args],
        env=env or dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


#: metrics.jsonl keys that measure time, not the run (they differ between two equal runs).
_TIMING = ("tokens_per_s", "step_s", "elapsed_s")


def _rows(run_dir) -> list[dict]:
    """metrics.jsonl rows without their timing keys."""
    return [{k: v for k, v in r.items() if k not in _TIMING} for r in read_metrics(run_dir)]


def _final_weights(case: str, run_dir) -> dict[str, torch.Tensor]:
    """The final trained tensors: the last checkpoint's model (train), the adapter (finetune)."""
    from safetensors.torch import load_file

    if case == "lora":
        return load_file(str(run_dir / "adapter_model.safetensors"))
    return ckpt.load_model_state(ckpt.latest_checkpoint(run_dir))


def _lora_args(spec, task, out, steps: int, resume: bool = False) -> list[str]:
    """`tying finetune` flags of a seconds-long LoRA run (dropout on: the random state counts)."""
    args = [str(spec), "--task", str(task), "--out", str(out), "--max-steps", str(steps)]
    args += ["--batch-size", "2", "--max-seq-len", "64", "--checkpoint-every", "2"]
    args += ["--dropout", "0.3", "--lr", "1e-2", "--seed", "5", "--train-interface"]
    args += ["--precision", "fp32", "--device", "cpu", "--no-progress"]
    return args + (["--resume"] if resume else [])


@pytest.mark.parametrize(
    "case",
    [
        pytest.param("default", id="default"),
        pytest.param(
            "cuda",
            id="cuda-compiled-bf16",
            marks=[
                pytest.mark.cuda,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
            ],
        ),
        pytest.param("lora", id="lora-finetune"),
    ],
)
def test_sigkill_then_resume_gives_identical_losses(
    small_corpus, tiny_teacher, tmp_path, capsys, case
) -> None:
    """A run killed with SIGKILL and resumed ends with the uninterrupted run's metrics and
    weights, bit for bit; while it runs, its folder is refused to a second run (exit 2, the
    holder named), and the kill leaves no stuck lock."""
    if case == "lora":  # a LoRA update (and the trained interface) of a tiny Llama
        steps, verb = 30, "finetune"
        task = tmp_path / "qa.jsonl"
        task.write_text(
            "".join(
                json.dumps({"prompt": f"Q: {i} plus {i}?\nA:", "completion": f" {2 * i}"}) + "\n"
                for i in range(12)
            )
        )

        def args(out, resume=False):
            return _lora_args(tiny_teacher, task, out, steps, resume)

    else:
        steps, verb = 12, "train"
        device = {"precision": "bf16", "compile": True} if case == "cuda" else {}
        settings = dict(max_steps=steps, tie="pit", **{"pit.trainable_z": True}, **device)

        def args(out, resume=False):
            return small_run(small_corpus, out, resume=resume, **settings)

    ref_dir, killed_dir = tmp_path / "ref", tmp_path / "killed"
    ref = _start(args(ref_dir), verb=verb)
    assert ref.wait(timeout=300) == 0, ref.stdout.read()
    reference = _losses(ref_dir)

    proc = _start(args(killed_dir), verb=verb)

    def wait_for_step(at_least: int) -> None:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            done = list(_losses(killed_dir)) if (killed_dir / "metrics.jsonl").exists() else []
            if done and max(done) >= at_least:
                return
            time.sleep(0.02)

    wait_for_step(1)
    capsys.readouterr()
    assert main([verb, *args(killed_dir, resume=True)]) == 2  # the folder is in use
    refused = capsys.readouterr().err.strip().splitlines()
    assert len(refused) == 1 and f"is in use by process {proc.pid} on " in refused[0], refused
    wait_for_step(5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    last = ckpt.latest_checkpoint(killed_dir)
    assert last is not None
    resumed_from = json.loads((last / "trainer.json").read_text())["step"]
    assert 0 < resumed_from < steps, "the run finished before it was killed; nothing was tested"

    again = _start(args(killed_dir, resume=True), verb=verb)  # the kill left no stuck lock
    assert again.wait(timeout=300) == 0, again.stdout.read()
    resumed = _losses(killed_dir)
    assert sorted(resumed) == list(range(1, steps + 1))
    for step in range(resumed_from + 1, steps + 1):
        assert resumed[step] == reference[step], (step, resumed[step], reference[step])
    assert _rows(killed_dir) == _rows(ref_dir)
    assert len(set(reference.values())) > 1
    final, final_ref = _final_weights(case, killed_dir), _final_weights(case, ref_dir)
    assert final.keys() == final_ref.keys()
    assert all(torch.equal(final[k], final_ref[k]) for k in final), "final weights differ"
    assert not (killed_dir / ".lock").exists()


class _NaNAfter(torch.nn.Module):
    """Wraps a model; its loss becomes NaN from the `after`-th training call on."""

    def __init__(self, model, after: int) -> None:
        super().__init__()
        self.inner = model
        self.interface = model.interface
        self.calls, self.after = 0, after

    def forward(self, inputs, targets):
        self.calls += int(self.training)
        loss = self.inner(inputs, targets)
        return loss * float("nan") if self.calls >= self.after else loss


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(small_corpus, tmp_path) -> None:
    from tying.train.build import build_setup
    from tying.train.distributed import init_distributed

    cfg = load_config(
        TrainConfig, None, small_run(small_corpus, tmp_path, max_steps=10, checkpoint_every=2)
    )
    setup = build_setup(cfg, init_distributed())
    accum = cfg.grad_accum_steps(1)
    setup.model = _NaNAfter(setup.model, after=4 * accum + 1)  # step 5's first micro-batch
    with pytest.raises(DivergenceError, match="at step 5.*step-0000004"):
        train(cfg, setup=setup)
    last = ckpt.latest_checkpoint(tmp_path)
    model_state, _, state = ckpt.load_checkpoint(last)
    assert state["step"] == 4
    assert all(torch.isfinite(t).all() for t in model_state.values())
    assert read_metrics(tmp_path)[-1]["event"] == "diverged"


def test_eval_command_prints_json(small_corpus, tmp_path) -> None:
    cfg = load_config(TrainConfig, None, small_run(small_corpus, tmp_path, max_steps=2))
    result = train(cfg)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tying",
            "eval",
            str(tmp_path),
            "--data",
            str(small_corpus["val"]),
            "--max-tokens",
            "1024",
            "--precision",
            "fp32",  # as the run validated (auto is bf16 on a CPU with native bf16)
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(out.stdout)
    assert report["loss"] == pytest.approx(result.val_loss, rel=1e-5)
    assert report["ppl"] == pytest.approx(torch.tensor(report["loss"]).exp().item(), rel=1e-6)
    assert report["tokens"] > 0


def test_vocabulary_mismatch_is_an_error(small_corpus, tmp_path) -> None:
    from tying.train.build import build_model, check_vocabulary

    cfg = load_config(TrainConfig, None, small_run(small_corpus, tmp_path))
    model = build_model(cfg, 100)  # a model with a smaller vocabulary than the tokenizer's 512
    with pytest.raises((ValueError, ConfigError), match="vocab"):
        check_vocabulary(512, model.interface.vocab_size, "test-tokenizer")
