"""Helpers of the training tests (fixtures: tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from ..conftest import as_overrides, tiny_train_settings


def small_run(corpus: dict[str, Path], out_dir: Path, **overrides) -> list[str]:
    """key=value overrides of a seconds-long CPU run on the small corpus: the tests' tiny run
    (`tiny_train_settings`) with validation and checkpoints every few steps."""
    base = {
        "val_data": corpus["val"],
        "global_batch_tokens": 256,
        "max_steps": 6,
        "warmup_steps": 2,
        "eval_every": 3,
        "eval_tokens": 1024,
        "checkpoint_every": 2,
    }
    return as_overrides(tiny_train_settings(corpus, out_dir, **{**base, **overrides}))
