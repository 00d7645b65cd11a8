"""Rebuild a trained model from a checkpoint folder (for eval, probe, lens and export)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tying.config import from_dict
from tying.train import checkpoint as ckpt
from tying.train.config import TrainConfig


def load_trained(path: str | Path) -> tuple[nn.Module, Any, TrainConfig, Path]:
    """(model in eval mode, tokenizer, its TrainConfig, checkpoint folder) from a run or checkpoint."""
    from tying.data.tokenizer import load_tokenizer
    from tying.train.build import build_model

    folder = ckpt.resolve_checkpoint(path)
    model_state, _, trainer_state = ckpt.load_checkpoint(folder)
    cfg = from_dict(TrainConfig, trainer_state["config"], source=str(folder / "trainer.json"))
    tokenizer = load_tokenizer(cfg.model if cfg.model is not None else cfg.tokenizer)
    model = build_model(cfg, tokenizer.vocab_size)
    model.load_state_dict(model_state)
    model.eval()
    return model, tokenizer, cfg, folder


def evaluate_checkpoint(
    path: str | Path,
    data: str | None = None,
    max_tokens: int | None = None,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """Loss (nats/token), perplexity and token count of a checkpoint on a text."""
    from tying.data.corpus import default_validation_source
    from tying.data.shards import ensure_shards, open_shards
    from tying.paths import cache_dir
    from tying.train.evaluate import evaluate
    from tying.train.loop import autocast_context

    model, tokenizer, cfg, folder = load_trained(path)
    source = data if data is not None else str(default_validation_source())
    store = open_shards(
        ensure_shards(source, cache_dir() / "shards", tokenizer, progress=False),
        expected_vocab_size=model.interface.vocab_size,
        allow_padded_vocab=True,
    )
    result = evaluate(
        model,
        store,
        seq_len=cfg.seq_len,
        batch_size=batch_size or cfg.micro_batch_size,
        max_tokens=max_tokens,
        autocast=lambda: autocast_context(cfg, torch.device("cpu")),
    )
    return {"checkpoint": str(folder), "data": source, **result}
