"""Fixtures for training tests: a small real-text corpus and a 512-token BPE tokenizer."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tying.paths import gutenberg_validation


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> dict[str, Path]:
    """Train/validation .jsonl files cut from the Gutenberg validation books, and a tokenizer."""
    root = tmp_path_factory.mktemp("corpus")
    with lzma.open(gutenberg_validation(), "rt") as f:
        text = json.loads(f.readline())["text"]
    paragraphs = [p.strip() for p in text[:400_000].split("\n\n") if len(p.strip()) > 40]
    train, val = paragraphs[: len(paragraphs) * 9 // 10], paragraphs[len(paragraphs) * 9 // 10 :]
    for name, docs in (("train.jsonl", train), ("val.jsonl", val)):
        (root / name).write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(train, trainer)
    tok_dir = root / "tokenizer"
    tok_dir.mkdir()
    tok.save(str(tok_dir / "tokenizer.json"))
    return {"train": root / "train.jsonl", "val": root / "val.jsonl", "tokenizer": tok_dir}


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch) -> None:
    """Shards of test corpora go to a per-session temporary cache."""
    monkeypatch.setenv("TYING_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


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
