"""Helpers of the experiment tests (fixtures small_corpus and tiny_teacher: tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def minimal_overrides(corpus: dict[str, Path], out_dir: Path) -> list[str]:
    """Overrides of configs/experiments/minimal.yaml that train on the small corpus."""
    return [
        f"out={out_dir}",
        f"train.data={corpus['train']}",
        f"train.val_data={corpus['val']}",
        f"train.tokenizer={corpus['tokenizer']}",
        "train.progress=false",
        "train.max_documents=null",
    ]
