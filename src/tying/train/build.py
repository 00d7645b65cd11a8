"""From a `TrainConfig` to the things a run needs: tokenizer, shards, sampler, model.

The model itself is `tying.train.resolve.build_model` (re-exported here), next to the model
resolver it shares its recursion with (a teacher may be a run).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tying.config import ConfigError
from tying.data.batches import WindowSampler, eval_batches
from tying.data.corpus import default_train_source, default_validation_source
from tying.data.shards import ensure_shards
from tying.data.token_store import TokenStore, open_shards
from tying.data.tokenizer import TextTokenizer, load_tokenizer
from tying.paths import cache_dir
from tying.train.config import TrainConfig
from tying.train.distributed import DistInfo, barrier
from tying.train.resolve import build_model, tokenizer_spec

__all__ = ["TrainingSetup", "build_model", "build_setup", "check_vocabulary", "tokenizer_spec"]

log = logging.getLogger(__name__)


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


def check_vocabulary(tokenizer_vocab: int, model_vocab: int, tokenizer_name: str) -> None:
    """Raise unless every id of the tokenizer is a row of the model's interface (V >= tokenizer's)."""
    if tokenizer_vocab > model_vocab:
        raise ConfigError(
            f"tokenizer {tokenizer_name!r} has {tokenizer_vocab} tokens but the model's vocabulary "
            f"is V={model_vocab}: ids >= {model_vocab} would be out of range; use the model's own "
            "tokenizer (or a preset built for this tokenizer's vocabulary)"
        )


#: The smallest token slice `max_tokens: auto` tokenizes (2^20 tokens: about 12 Gutenberg books,
#: a few seconds of tokenization on 2 cores).
MIN_AUTO_TOKENS = 2**20


def data_token_budget(cfg: TrainConfig) -> int | None:
    """The training tokens a run tokenizes (`TrainConfig.max_tokens`): None = all of the source.

    "auto" covers what the run reads, max_steps × global_batch_tokens + one window, plus in
    teacher mode the calibration of the conversion (fit tokens + check tokens), rounded up to a
    power of two and at least `MIN_AUTO_TOKENS`, so that runs of nearby lengths share one cached
    slice (a resumed run keeps the slice of its first run: `resolve_token_budget`).
    """
    if cfg.max_tokens != "auto":
        return cfg.max_tokens
    need = cfg.max_steps * cfg.global_batch_tokens + cfg.seq_len + 1
    fit = getattr(cfg.interface_options, "fit", None)  # PIT's conversion fit (pit.fit)
    if cfg.model is not None and fit is not None:
        need += fit.tokens + fit.check_tokens
    return max(MIN_AUTO_TOKENS, 1 << (need - 1).bit_length())


def resolve_token_budget(cfg: TrainConfig) -> int | None:
    """Set `cfg.max_tokens` to the training tokens of the run (an integer, or None for all) and
    return it, so that the run folder's config.yaml records the slice.

    A resumed run keeps the slice of the run it continues (the `max_tokens` of its config.yaml;
    a config.yaml without the key is a run of an earlier version, trained on the whole source),
    unless this command sets max_tokens itself; otherwise `data_token_budget`.
    """
    saved = Path(cfg.out) / "config.yaml"
    if cfg.resume and cfg.max_tokens == "auto" and saved.is_file():
        import yaml

        data = yaml.safe_load(saved.read_text(encoding="utf-8")) or {}
        kept = data.get("max_tokens")
        if kept is None or isinstance(kept, int):
            cfg.max_tokens = kept
            return kept
    cfg.max_tokens = data_token_budget(cfg)
    return cfg.max_tokens


def validation_token_budget(cfg: TrainConfig) -> int | None:
    """The held-out tokens a run tokenizes: None (all) when `max_tokens` is null, else what its
    validation passes and step-0 measurement read (they read the store's first tokens, so the
    numbers equal those on the whole source), rounded up to a power of two, at least 2^16."""
    if cfg.max_tokens is None:
        return None
    need = max(cfg.eval_tokens, cfg.step0_tokens) + cfg.seq_len + 1
    return max(2**16, 1 << (need - 1).bit_length())


def _shards(
    source: str | Path,
    tokenizer: TextTokenizer,
    info: DistInfo,
    max_documents: int | None,
    progress: bool,
    max_tokens: int | None = None,
) -> Path:
    """Token shards of `source` (built once by rank 0, cached, reused by later runs)."""
    root = cache_dir() / "shards"
    limits = {"max_documents": max_documents, "max_tokens": max_tokens}
    if info.is_main:
        folder = ensure_shards(source, root, tokenizer, progress=progress, **limits)
    barrier(info)
    if not info.is_main:
        folder = ensure_shards(source, root, tokenizer, progress=False, **limits)
    return folder


def calibration_windows(
    store: TokenStore, seq_len: int, tokens: int, seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Single-window batches (1, L) of `store`, in a shuffled order of its own seed, ≥ `tokens`."""
    sampler = WindowSampler(store, seq_len, 1, seed=seed)
    count = -(-tokens // seq_len)
    return [sampler.next_batch() for _ in range(count)]


def _teacher_mode_windows(
    cfg: TrainConfig, store: TokenStore, val_store: TokenStore | None
) -> tuple[Callable[[int], list] | None, list | None]:
    """(calibration, measure) for converting a teacher: calibration windows on demand."""

    def calibration(tokens: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return calibration_windows(store, cfg.seq_len, tokens, seed=cfg.seed + 1)

    measure = None
    if cfg.step0_tokens > 0 and val_store is not None:
        measure = list(
            eval_batches(val_store, cfg.seq_len, cfg.micro_batch_size, max_tokens=cfg.step0_tokens)
        )
    return calibration, measure


def build_setup(cfg: TrainConfig, info: DistInfo, *, calibrate: bool = True) -> TrainingSetup:
    """Tokenizer, shards, sampler and model of a run (deterministic given cfg.seed).

    Args:
        cfg: the run's configuration.
        info: this process's place in the process group.
        calibrate: teacher mode: measure and repair the conversion on data (scale search,
            fit, step-0 KL). False when the weights come from a checkpoint anyway.
    """
    tokenizer = load_tokenizer(tokenizer_spec(cfg))
    source = cfg.data if cfg.data is not None else default_train_source()
    budget = resolve_token_budget(cfg)
    log.info("training text: %s tokens of %s", "all" if budget is None else f"{budget:,}", source)
    train_folder = _shards(source, tokenizer, info, cfg.max_documents, cfg.progress, budget)
    val_store = None
    val_source = cfg.val_data if cfg.val_data is not None else default_validation_source()
    if val_source != "":
        val_budget = validation_token_budget(cfg)
        val_folder = _shards(val_source, tokenizer, info, None, cfg.progress, val_budget)
        val_store = open_shards(val_folder, allow_padded_vocab=True)
    store = open_shards(train_folder, allow_padded_vocab=True)
    calibration = measure = None
    if cfg.model is not None and calibrate:
        calibration, measure = _teacher_mode_windows(cfg, store, val_store)
    model = build_model(cfg, tokenizer.vocab_size, calibration=calibration, measure=measure)
    vocab = model.interface.vocab_size
    check_vocabulary(tokenizer.vocab_size, vocab, tokenizer.name)
    store = open_shards(train_folder, expected_vocab_size=vocab, allow_padded_vocab=True)
    if val_store is not None:
        val_store = open_shards(
            val_store.folder, expected_vocab_size=vocab, allow_padded_vocab=True
        )
    micro = cfg.micro_batch_size
    sampler = WindowSampler(
        store, cfg.seq_len, micro, seed=cfg.seed, rank=info.rank, world_size=info.world_size
    )
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
