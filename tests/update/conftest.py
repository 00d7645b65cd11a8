"""Fixtures of the update tests: a tiny random Llama (tied, d = 32) saved with a byte-level BPE
trained on the benchmark texts, native TT and PIT runs of our decoder, and a small
prompt/completion JSONL file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import train_tiny
from ..evaluation._harness_models import save_tiny_model, train_tokenizer


@pytest.fixture(scope="session")
def bench_tokenizer():
    """The byte-level BPE (1,024 tokens) of the evaluation tests."""
    return train_tokenizer()


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory, bench_tokenizer) -> Path:
    """Folder of a tiny random tied Llama (transformers format, with its tokenizer)."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-base"), bench_tokenizer)


def write_jsonl(path: Path, records: list) -> Path:
    """One JSON value per line."""
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def qa_file(tmp_path: Path) -> Path:
    """12 short prompt/completion records."""
    records = [
        {"prompt": f"Question: what is {i} plus {i}?\nAnswer:", "completion": f" {2 * i}"}
        for i in range(12)
    ]
    return write_jsonl(tmp_path / "qa.jsonl", records)


@pytest.fixture(scope="session")
def decoder_runs(small_corpus, tmp_path_factory) -> dict[str, Path]:
    """Native training runs of our decoder, one per tie (the tiny preset, 2 steps)."""
    root = tmp_path_factory.mktemp("decoder-runs")
    return {
        tie: train_tiny(small_corpus, root / tie, root / "cache", tie=tie, max_steps=2)
        for tie in ("tt", "pit")
    }
