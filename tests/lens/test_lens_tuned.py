"""Tuned lens: zero lens = logit lens, training lowers every intermediate KL, save/reload."""

from __future__ import annotations

import json

import pytest
import torch

from tying.lens import (
    LogitLens,
    TunedLens,
    TunedLensTraining,
    evaluate_lens,
    train_tuned_lens,
    tuned_lens_kl,
)
from tying.lens.tuned_lens import CONFIG_FILE, WEIGHTS_FILE

from .conftest import LAYERS, SEQ, loaded, sample_chain, tiny_decoder


def _steps(chain, steps: int, windows: int = 8, micro: int = 4, seed: int = 0):
    """Training steps of the Markov chain: lists of micro-batches, seeds disjoint from eval."""
    for s in range(steps):
        ids = sample_chain(chain, windows, SEQ, seed=10_000 + seed * 1_000 + s)
        yield list(ids.split(micro))


def _eval_batches(chain, n: int = 4):
    return [sample_chain(chain, 8, SEQ, seed=50_000 + i) for i in range(n)]


def test_zero_tuned_lens_is_the_logit_lens() -> None:
    lm = loaded(tiny_decoder("untied"))
    batches = _eval_batches(torch.full((64, 64), 1 / 64), 2)
    zero = TunedLens.for_model(lm)
    assert zero.weight.shape == (LAYERS, 64, 64) and zero.bias.shape == (LAYERS, 64)
    assert evaluate_lens(lm, zero, batches).kl == evaluate_lens(lm, LogitLens(), batches).kl


def test_tuned_lens_beats_logit_lens_at_every_intermediate_entry(trained_decoder) -> None:
    lm = loaded(trained_decoder.model)
    chain = trained_decoder.chain
    batches = _eval_batches(chain)
    logit = evaluate_lens(lm, LogitLens(), batches)
    cfg = TunedLensTraining(steps=100, tokens_per_step=8 * SEQ)  # the default SGD recipe
    lens, history = train_tuned_lens(lm, _steps(chain, cfg.steps), cfg, chunk_tokens=100)
    assert len(history.kl) == cfg.steps and history.tokens == cfg.steps * 8 * SEQ
    assert history.kl[-1] < history.kl[0]
    tuned = tuned_lens_kl(lm, lens, batches)
    assert tuned.tokens == logit.tokens
    assert abs(tuned.kl[-1]) < 1e-6 and abs(logit.kl[-1]) < 1e-6
    for i in range(LAYERS):
        assert tuned.kl[i] < logit.kl[i], (i, tuned.kl, logit.kl)
    # the model is left as it was: frozen only while training
    assert all(p.requires_grad for p in trained_decoder.model.parameters())


def test_save_and_reload_give_identical_kl(tmp_path, trained_decoder) -> None:
    lm = loaded(trained_decoder.model, name="markov")
    cfg = TunedLensTraining(steps=5, tokens_per_step=8 * SEQ, optimizer="adam")
    lens, _ = train_tuned_lens(lm, _steps(trained_decoder.chain, 5, seed=7), cfg)
    folder = lens.save(tmp_path / "lens")
    config = json.loads((folder / CONFIG_FILE).read_text())
    assert config["d_model"] == 64 and config["n_entries"] == LAYERS + 1
    assert config["model"] == "markov" and config["training"]["steps"] == 5
    assert config["training"]["optimizer"] == "adam" and config["training"]["warmup_steps"] == 1
    assert (folder / WEIGHTS_FILE).is_file()
    again = TunedLens.load(folder)
    torch.testing.assert_close(again.weight, lens.weight, rtol=0, atol=0)
    torch.testing.assert_close(again.bias, lens.bias, rtol=0, atol=0)
    batches = _eval_batches(trained_decoder.chain, 2)
    assert tuned_lens_kl(lm, again, batches).kl == tuned_lens_kl(lm, lens, batches).kl
    assert lens.weight.abs().sum() > 0


def test_lens_for_another_model_is_rejected(tmp_path) -> None:
    lens = TunedLens(64, LAYERS + 2, "other")
    with pytest.raises(ValueError, match="does not fit"):
        tuned_lens_kl(loaded(tiny_decoder()), lens, [torch.zeros(1, 4, dtype=torch.long)])
    with pytest.raises(FileNotFoundError, match="lens.safetensors"):
        TunedLens.load(tmp_path)
    with pytest.raises(IndexError, match="out of range"):
        lens.translate(torch.zeros(64), LAYERS + 2)


def test_translator_formula() -> None:
    lens = TunedLens(4, 3)
    with torch.no_grad():
        lens.weight.normal_()
        lens.bias.normal_()
    h = torch.randn(5, 4)
    torch.testing.assert_close(lens.translate(h, 1), h + h @ lens.weight[1].T + lens.bias[1])
    assert lens.translate(h, 2) is h  # the last entry is the identity
    assert lens.translate(h, -1) is h


def test_training_config_validation() -> None:
    with pytest.raises(ValueError, match="optimizer"):
        TunedLensTraining(optimizer="lbfgs")
    assert TunedLensTraining().resolved_lr() == pytest.approx(0.1)
    assert TunedLensTraining(optimizer="adam", steps=100).resolved_warmup() == 20
