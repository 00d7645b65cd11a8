"""The GPU path, where users train: compiled = eager, the lens in bf16 against fp32, the probe and
greedy generation on CUDA (SIGKILL + resume bitwise with compile on is a case of
tests/train/test_train_run.py, the LoRA finetune tests/update/test_finetune_cuda.py).

All tests are marked `cuda` and skip without a GPU (`pytest -m cuda` runs them alone)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from ..conftest import as_overrides, random_llama, tiny_train_settings

pytestmark = pytest.mark.cuda

#: 8 AdamW steps of the tiny preset: compiled and eager losses must agree this closely (nats).
LOSS_TOL = 1e-3


def _steps(
    model: torch.nn.Module, compiled: bool, batches: list, precision: str
) -> tuple[list[float], torch.Tensor]:
    """Losses of AdamW steps on `batches`, and the first step's gradient (all parameters, flat)."""
    from tying.train.optim import build_optimizers

    opts = build_optimizers(model, lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95))
    if getattr(model.interface, "trainable_z", False):
        model.interface.attach_retraction(opts.optimizer_of(model.interface.z))
    forward = torch.compile(model) if compiled else model
    losses, first_grad = [], None
    for x, y in batches:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = forward(x, y)
        loss.backward()
        if first_grad is None:
            first_grad = torch.cat(
                [p.grad.float().flatten() for p in model.parameters() if p.grad is not None]
            )
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opts.step()
        opts.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return losses, first_grad


@pytest.mark.parametrize("tie", ["tt", "pit", "untied"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_compiled_training_equals_eager(cuda, tie: str, precision: str) -> None:
    from tying.decoder import Decoder, preset_config

    V = 512
    extra = {"pit_trainable_z": True} if tie == "pit" else {}
    g = torch.Generator().manual_seed(0)
    # a learnable next token (a fixed permutation of the current one) on two alternating
    # batches: the loss must fall in 8 steps, so frozen or zero gradients cannot pass
    perm = torch.randperm(V, generator=g)
    pairs = []
    for _ in range(2):
        ids = torch.randint(0, V, (4, 64), generator=g)
        pairs.append((ids.to(cuda), perm[ids].to(cuda)))
    batches = [pairs[i % 2] for i in range(8)]
    runs = {}
    for compiled in (False, True):
        torch.manual_seed(0)
        model = Decoder(preset_config("tiny", vocab_size=V, tie=tie, **extra)).to(cuda)
        runs[compiled] = _steps(model, compiled, batches, precision)
    (eager, eager_grad), (compiled, compiled_grad) = runs[False], runs[True]
    assert eager[-1] < eager[0] - 0.1, f"eager did not learn: {eager}"
    assert compiled[-1] < compiled[0] - 0.1, f"compiled did not learn: {compiled}"
    relative = float((compiled_grad - eager_grad).norm() / eager_grad.norm())
    if precision == "fp32":  # the bar: every step's loss, the gradients
        assert relative < 1e-4, relative
        for step, (a, b) in enumerate(zip(eager, compiled, strict=True)):
            assert abs(a - b) < LOSS_TOL, (step, eager, compiled)
    else:
        # bf16 products round in a different order compiled, and at this learning rate the
        # two trajectories part by up to 0.1 nats in 8 steps (measured with Inductor on the
        # CPU); the same weights must still give the same first loss and gradient
        assert abs(eager[0] - compiled[0]) < 1e-2, (eager, compiled)
        assert relative < 5e-2, relative


def test_lens_bf16_follows_fp32_on_cuda(cuda) -> None:
    from tying.lens import LogitLens, evaluate_lens
    from tying.loader import wrap_model

    model = random_llama(256, 64, 128, 128, tied=True, pad_token_id=0)
    lm = wrap_model(model.eval())
    lm.model.to(cuda)
    batches = [torch.randint(0, 256, (2, 64)) for _ in range(2)]
    fp32 = evaluate_lens(lm, LogitLens(), batches, precision="fp32", device=cuda).kl
    bf16 = evaluate_lens(lm, LogitLens(), batches, precision="bf16", device=cuda).kl
    assert max(fp32) > 1e-3  # the early layers differ from the final distribution
    for a, b in zip(fp32, bf16, strict=True):
        assert abs(a - b) < 1e-3 + 1e-2 * a, (fp32, bf16)


def test_greedy_generate_equals_transformers_generate_on_cuda(cuda) -> None:
    from tying.evaluation.generate import greedy_generate

    model = random_llama(256, 64, 128, 128, tied=True, pad_token_id=0).to(cuda).eval()
    ids = torch.randint(3, 256, (3, 12)).to(cuda)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding
    with torch.no_grad():
        reference = model.generate(
            ids, attention_mask=mask, max_new_tokens=16, do_sample=False, pad_token_id=0
        )
        ours = greedy_generate(model, ids, mask, max_new_tokens=16, eos_token_id=2, pad_token_id=0)
    assert torch.equal(reference, ours)


def test_probe_runs_on_a_cuda_trained_run(cuda, small_corpus, tmp_path) -> None:
    run = tmp_path / "run"
    settings = tiny_train_settings(small_corpus, run, max_steps=3, precision="bf16")
    done = subprocess.run(
        [sys.executable, "-m", "tying", "train", *as_overrides(settings)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    probe = subprocess.run(
        [
            sys.executable,
            "-m",
            "tying",
            "probe",
            str(run),
            "--corpus",
            str(small_corpus["val"]),
            "--out",
            str(tmp_path / "probe"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    report = json.loads((tmp_path / "probe" / "probe.json").read_text())
    assert report  # the blocks ran; errors would have made the exit status 1
