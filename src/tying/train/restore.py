"""Rebuild a trained model from a checkpoint folder (for eval, probe, lens and export)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from tying.data.tokenizer import load_tokenizer
from tying.train import checkpoint as ckpt
from tying.train.build import build_model, tokenizer_spec
from tying.train.config import TrainConfig, saved_train_config


def load_trained(path: str | Path) -> tuple[nn.Module, Any, TrainConfig, Path]:
    """(model in eval mode, tokenizer, its TrainConfig, checkpoint folder) from a run or checkpoint."""
    folder = ckpt.resolve_checkpoint(path)
    model_state = ckpt.load_model_state(folder)
    trainer_state = ckpt.read_trainer_state(folder)
    cfg = saved_train_config(trainer_state["config"], source=str(folder / "trainer.json"))
    tokenizer = load_tokenizer(tokenizer_spec(cfg))
    model = build_model(cfg, tokenizer.vocab_size)
    model.load_state_dict(model_state)
    model.eval()
    return model, tokenizer, cfg, folder
