"""`TYING_EXAMPLE_BUDGET=tiny` (`tying.example_budget`): what it caps, what it keeps."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from tying.example_budget import EXAMPLE_BUDGET_ENV, TINY, apply_example_budget, example_budget


def test_unset_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from tying.train.config import TrainConfig

    monkeypatch.delenv(EXAMPLE_BUDGET_ENV, raising=False)
    cfg = TrainConfig(max_steps=200)
    assert apply_example_budget(cfg) is cfg
    assert dataclasses.asdict(cfg) == dataclasses.asdict(TrainConfig(max_steps=200))
    monkeypatch.setenv(EXAMPLE_BUDGET_ENV, "huge")
    with pytest.raises(ValueError, match="TYING_EXAMPLE_BUDGET must be tiny or unset"):
        example_budget()


def test_train_is_capped_and_stays_valid(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    from tying.train.build import data_token_budget
    from tying.train.config import TrainConfig

    monkeypatch.setenv(EXAMPLE_BUDGET_ENV, "tiny")
    with caplog.at_level(logging.WARNING, logger="tying.example_budget"):
        cfg = apply_example_budget(TrainConfig(tie="pit", max_steps=200, seq_len=32, lr=1e-3))
    assert "TYING_EXAMPLE_BUDGET=tiny: TrainConfig shrunk" in caplog.text
    assert (cfg.max_steps, cfg.seq_len, cfg.micro_batch_size) == (2, 32, 2)  # 32 < 64 is kept
    assert cfg.global_batch_tokens == 64 and cfg.grad_accum_steps(1) == 1
    assert (cfg.eval_tokens, cfg.step0_tokens, cfg.max_tokens) == (128, 128, 512)
    assert data_token_budget(cfg) == 512
    assert (cfg.pit.fit.tokens, cfg.pit.fit.check_tokens) == (256, 64)
    assert (cfg.tie, cfg.lr, cfg.preset) == ("pit", 1e-3, "tiny")  # not budget knobs: kept
    again = TrainConfig(**{**dataclasses.asdict(cfg), "tt": cfg.tt, "pit": cfg.pit})
    assert again.max_steps == 2  # the capped values pass TrainConfig's own checks
    assert apply_example_budget(TrainConfig(max_steps=1)).max_steps == 1


def test_none_means_all_becomes_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    from tying.evaluation.evaluate import EvaluateOptions
    from tying.update import FinetuneOptions

    monkeypatch.setenv(EXAMPLE_BUDGET_ENV, "tiny")
    evaluate = apply_example_budget(EvaluateOptions(spec="smollm2", out="o", limit=None))
    assert (evaluate.limit, evaluate.max_new_tokens) == (TINY["limit"], TINY["max_new_tokens"])
    finetune = apply_example_budget(FinetuneOptions(spec="smollm2", task="mbpp", out="o"))
    assert (finetune.max_steps, finetune.max_seq_len, finetune.batch_size) == (2, 128, 2)


def test_an_experiment_gets_tiny_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from tying.experiment import ExperimentConfig

    monkeypatch.setenv(EXAMPLE_BUDGET_ENV, "tiny")
    cfg = apply_example_budget(
        ExperimentConfig(
            name="g", out="o", ties=["tt", "pit"], seeds=[0, 1, 2], train={"max_steps": 400}
        )
    )
    assert cfg.seeds == [0]
    for spec in cfg.runs():
        run = cfg.train_config(spec)
        assert (run.max_steps, run.global_batch_tokens, run.max_tokens) == (2, 128, 512)
        assert run.grad_accum_steps(1) == 1
