"""From a `TrainConfig` to the things a run needs: tokenizer, shards, sampler, model."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tying.config import ConfigError
from tying.data.batches import WindowSampler
from tying.data.corpus import default_train_source, default_validation_source
from tying.data.shards import TokenStore, ensure_shards, open_shards
from tying.data.tokenizer import TextTokenizer, load_tokenizer
from tying.interface.pit import scratch_t_scale
from tying.paths import cache_dir
from tying.train.config import T_SCALE_MATCH_TT, TrainConfig
from tying.train.distributed import DistInfo, barrier


@dataclass
class TrainingSetup:
    """Everything `train` consumes besides the config.

    Attributes:
        model: a causal LM with `.interface` and `forward(inputs, targets) -> loss`.
        tokenizer: the tokenizer the shards were made with.
        sampler: training batches (this rank's micro-batches).
        val_store: held-out tokens, or None.
        make_tracker: builds a gradient-path tracker for the model's interface.
    """

    model: nn.Module
    tokenizer: TextTokenizer
    sampler: WindowSampler
    val_store: TokenStore | None
    make_tracker: Callable[[Any], Any]


def build_model(cfg: TrainConfig, vocab_size: int) -> nn.Module:
    """The model of a run: a decoder preset (scratch) or a converted HF model (teacher)."""
    if cfg.model is not None:
        from tying.hf import HFCausalLM, convert, load

        hf_model, _ = load(cfg.model)
        options: dict[str, Any] = {}
        if cfg.tie == "pit":
            options = {"t_init": cfg.t_init, "trainable_z": cfg.trainable_z}
        elif cfg.tie == "tt" and cfg.input_grad_scale != 1.0:
            options = {"input_grad_scale": cfg.input_grad_scale}
        convert(hf_model, tie=cfg.tie, **options)
        return HFCausalLM(hf_model)
    from tying.model.decoder import Decoder
    from tying.model.presets import preset_config

    model_cfg = preset_config(
        cfg.preset,
        vocab_size=vocab_size,
        tie=cfg.tie,
        norm=cfg.norm,
        max_seq_len=max(cfg.seq_len, 1024),
        input_grad_scale=cfg.input_grad_scale,
        pit_trainable_z=cfg.trainable_z if cfg.tie == "pit" else False,
        pit_diag_activation=cfg.pit_diag_activation,
    )
    model = Decoder(model_cfg, generator=torch.Generator().manual_seed(cfg.seed))
    if cfg.tie == "pit" and cfg.pit_t_scale != 1.0:
        c = pit_t_scale(cfg, model_cfg.vocab_size, model_cfg.d_model, model_cfg.init_std)
        model.interface.scale_transform_(c)
    return model


def pit_t_scale(cfg: TrainConfig, vocab_size: int, d_model: int, init_std: float) -> float:
    """The scratch T = c·I of a run: `pit_t_scale`, or for "match_tt" the c that gives E's rows
    the mean norm init_std·√d of an N(0, init_std²) row: c = 1/(init_std·√V)."""
    if cfg.pit_t_scale == T_SCALE_MATCH_TT:
        return scratch_t_scale(vocab_size, d_model, init_std * math.sqrt(d_model))
    return float(cfg.pit_t_scale)


def check_vocabulary(tokenizer_vocab: int, model_vocab: int, tokenizer_name: str) -> None:
    """Raise unless every id of the tokenizer is a row of the model's interface (V >= tokenizer's)."""
    if tokenizer_vocab > model_vocab:
        raise ConfigError(
            f"tokenizer {tokenizer_name!r} has {tokenizer_vocab} tokens but the model's vocabulary "
            f"is V={model_vocab}: ids >= {model_vocab} would be out of range; use the model's own "
            "tokenizer (or a preset built for this tokenizer's vocabulary)"
        )


def _shards(
    source: str | Path,
    tokenizer: TextTokenizer,
    info: DistInfo,
    max_documents: int | None,
    progress: bool,
) -> Path:
    """Token shards of `source` (built once by rank 0, cached, reused by later runs)."""
    root = cache_dir() / "shards"
    if info.is_main:
        folder = ensure_shards(
            source, root, tokenizer, max_documents=max_documents, progress=progress
        )
    barrier(info)
    if not info.is_main:
        folder = ensure_shards(source, root, tokenizer, max_documents=max_documents, progress=False)
    return folder


def build_setup(cfg: TrainConfig, info: DistInfo) -> TrainingSetup:
    """Tokenizer, shards, sampler and model of a run (deterministic given cfg.seed)."""
    tokenizer = load_tokenizer(cfg.model if cfg.model is not None else cfg.tokenizer)
    model = build_model(cfg, tokenizer.vocab_size)
    vocab = model.interface.vocab_size
    check_vocabulary(tokenizer.vocab_size, vocab, tokenizer.name)
    source = cfg.data if cfg.data is not None else default_train_source()
    train_folder = _shards(source, tokenizer, info, cfg.max_documents, cfg.progress)
    store = open_shards(train_folder, expected_vocab_size=vocab, allow_padded_vocab=True)
    micro = cfg.micro_batch_size
    sampler = WindowSampler(
        store, cfg.seq_len, micro, seed=cfg.seed, rank=info.rank, world_size=info.world_size
    )
    val_store = None
    val_source = cfg.val_data if cfg.val_data is not None else default_validation_source()
    if val_source != "":
        val_folder = _shards(val_source, tokenizer, info, None, cfg.progress)
        val_store = open_shards(val_folder, expected_vocab_size=vocab, allow_padded_vocab=True)
    return TrainingSetup(
        model=model,
        tokenizer=tokenizer,
        sampler=sampler,
        val_store=val_store,
        make_tracker=_make_tracker,
    )


def _make_tracker(interface: Any) -> Any:
    from tying.analysis.gradient_paths import GradientPathTracker

    return GradientPathTracker(interface)
