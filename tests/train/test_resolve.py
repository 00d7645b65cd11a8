"""The one model resolver (`tying.train.resolve`): every consumer reads a SPEC the same way, and
`tying convert` converts a training run of our decoder as it converts a transformers model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tying.cli import main
from tying.config import load_config
from tying.conversion import convert
from tying.interface import PseudoInverseTying
from tying.loader import load_any
from tying.train import train
from tying.train.checkpoint import CHECKPOINT_DIR
from tying.train.config import TrainConfig
from tying.train.distill import DistillConfig, load_teacher
from tying.train.resolve import resolve_model

from .conftest import small_run

IDS = torch.arange(0, 40).reshape(2, 20)


@pytest.fixture(scope="module")
def tt_run(small_corpus, tmp_path_factory) -> Path:
    """A two-step TT run of the tiny decoder with one checkpoint."""
    run_dir = tmp_path_factory.mktemp("resolve") / "run"
    train(load_config(TrainConfig, None, small_run(small_corpus, run_dir, tie="tt", max_steps=2)))
    return run_dir


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        out = model(IDS)
    return getattr(out, "logits", out)


def test_every_run_spec_resolves_to_the_same_run(tt_run, tiny_teacher) -> None:
    """The run folder, its checkpoints/ folder and the checkpoint folder name one model; the
    loader, the distillation teacher (which refused checkpoints/ before) and the resolver
    agree on it, and a transformers folder is kind "hf"."""
    checkpoint = resolve_model(tt_run).checkpoint
    reference = _logits(resolve_model(tt_run).model)
    for spec in (tt_run, tt_run / CHECKPOINT_DIR, checkpoint):
        resolved = resolve_model(spec)
        assert resolved.kind == "run" and resolved.checkpoint == checkpoint
        assert resolved.train_config.tie == "tt" and resolved.tokenizer.vocab_size == 512
        torch.testing.assert_close(_logits(resolved.model), reference, rtol=0, atol=0)
        teacher = load_teacher(DistillConfig(teacher=str(spec)), None)
        assert not any(p.requires_grad for p in teacher.parameters())
        torch.testing.assert_close(_logits(teacher), reference, rtol=0, atol=0)
        loaded = load_any(spec)
        assert loaded.kind == "run" and loaded.checkpoint == checkpoint
    hf = resolve_model(tiny_teacher)
    assert hf.kind == "hf" and hf.checkpoint is None and hf.train_config is None


def test_convert_converts_a_training_run(tt_run, tmp_path, capsys) -> None:
    """`tying convert RUN --tie pit`: the folder it writes loads (tying.load) to the logits of
    the run converted in memory, and t_init=input at scale 1 keeps the run's embedding E."""
    out = tmp_path / "pit"
    argv = ["convert", str(tt_run), "--tie", "pit", "--pit.t-init", "input"]
    argv += ["--pit.input-scale", "1"]
    argv += ["--step0-tokens", "0"]  # the closed form needs no text (the step-0 KL: elsewhere)
    assert main([*argv, "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["report"]
    assert report["tie"] == "pit" and report["family"] == "interface-model"
    assert report["t_init"] == "input" and report["input_scale"] == 1.0

    expected = resolve_model(tt_run).model
    convert(expected, "pit", t_init="input", input_scale=1.0)
    converted = load_any(out)
    assert isinstance(converted.interface, PseudoInverseTying)
    assert converted.tokenizer is not None and converted.tokenizer.vocab_size == 512
    torch.testing.assert_close(_logits(converted.model), _logits(expected), rtol=0, atol=0)
    run = resolve_model(tt_run).model
    torch.testing.assert_close(
        converted.interface.embedding_matrix(),
        run.interface.embedding_matrix(),
        rtol=1e-4,
        atol=1e-5,
    )
