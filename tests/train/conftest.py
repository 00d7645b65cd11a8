"""Helpers of the training tests (fixtures: tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path


def small_run(corpus: dict[str, Path], out_dir: Path, **overrides) -> list[str]:
    """key=value overrides of a seconds-long CPU run on the small corpus."""
    base = {
        "data": corpus["train"],
        "val_data": corpus["val"],
        "tokenizer": corpus["tokenizer"],
        "preset": "tiny",
        "seq_len": 32,
        "micro_batch_size": 4,
        "global_batch_tokens": 256,
        "max_steps": 6,
        "warmup_steps": 2,
        "lr": 3e-3,
        "eval_every": 3,
        "eval_tokens": 1024,
        "checkpoint_every": 2,
        "precision": "fp32",
        "progress": False,
        "tensorboard": False,
        "out_dir": out_dir,
    }
    base.update(overrides)
    return [f"{k}={v}" for k, v in base.items()]
