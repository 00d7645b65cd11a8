"""From a `TrainConfig` to the things a run needs: tokenizer, shards, sampler, model."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tying.config import ConfigError
from tying.data.batches import WindowSampler, eval_batches
from tying.data.corpus import default_train_source, default_validation_source
from tying.data.shards import TokenStore, ensure_shards, open_shards
from tying.data.tokenizer import TextTokenizer, load_tokenizer
from tying.decoder import Decoder, ModelConfig, preset_config
from tying.hf import HFCausalLM, convert, load
from tying.hf.convert import REPORT_ATTR
from tying.interface import build_interface, interface_class
from tying.paths import cache_dir
from tying.train.config import TrainConfig
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


def build_model(
    cfg: TrainConfig,
    vocab_size: int,
    *,
    calibration: Callable[[int], list[tuple[torch.Tensor, torch.Tensor]]] | None = None,
    measure: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> nn.Module:
    """The model of a run: a decoder preset (scratch) or a converted HF model (teacher).

    The interface's own options come from the run's section of it (`TrainConfig.tt`,
    `.pit`, ...: `TrainConfig.interface_keywords`), whatever the interface.

    Args:
        cfg: the run's configuration.
        vocab_size: V of the tokenizer (scratch mode).
        calibration: teacher mode: a function `tokens -> windows` of calibration text, called
            when the conversion asks for data (PIT's input-scale search and fit). Without it
            the model gets the same structure from the closed form (for a checkpoint's
            weights to be loaded into).
        measure: teacher mode: windows on which the step-0 KL is measured (report.step0).
    """
    options = cfg.interface_keywords()
    if cfg.model is not None:
        if calibration is None and options.get("t_init") == "fit":
            del options["t_init"]  # the default: its closed form without data, same structure
        decoder_run = is_decoder_run(cfg.model)
        teacher = _load_decoder_run(cfg.model) if decoder_run else load(cfg.model)[0]
        report = convert(
            teacher,
            tie=cfg.tie,
            calibration=calibration,
            measure=measure,
            fit_options=cfg.fit,
            progress=cfg.progress,
            **options,
        )
        if decoder_run:  # kept as a transformers model keeps it (`tying.hf.conversion_report`)
            setattr(teacher, REPORT_ATTR, report)
            return teacher.train()
        return HFCausalLM(teacher)
    # Keywords the model config carries (its flat keys, `config_options`) go through it; the
    # rest (PIT's t_scale) to an interface built here.
    model_keys = {kw: key for key, kw in interface_class(cfg.tie).config_options.items()}
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    through_config = {model_keys[kw]: v for kw, v in options.items() if kw in model_keys}
    extra = {kw: v for kw, v in options.items() if kw not in model_keys}
    model_cfg = preset_config(
        cfg.preset,
        vocab_size=vocab_size,
        tie=cfg.tie,
        norm=cfg.norm,
        max_seq_len=max(cfg.seq_len, 1024),
        **{k: v for k, v in through_config.items() if k in model_fields},
    )
    generator = torch.Generator().manual_seed(cfg.seed)
    interface = None
    if extra:  # e.g. PIT's scratch T = c·I
        # Drawn first from the same generator, as Decoder draws its own interface: the
        # blocks get the same initial weights as without these options.
        interface = build_interface(
            model_cfg.tie,
            model_cfg.vocab_size,
            model_cfg.d_model,
            generator=generator,
            init_std=model_cfg.init_std,
            **extra,
            **model_cfg.interface_options(),
        )
    return Decoder(model_cfg, interface=interface, generator=generator)


def check_vocabulary(tokenizer_vocab: int, model_vocab: int, tokenizer_name: str) -> None:
    """Raise unless every id of the tokenizer is a row of the model's interface (V >= tokenizer's)."""
    if tokenizer_vocab > model_vocab:
        raise ConfigError(
            f"tokenizer {tokenizer_name!r} has {tokenizer_vocab} tokens but the model's vocabulary "
            f"is V={model_vocab}: ids >= {model_vocab} would be out of range; use the model's own "
            "tokenizer (or a preset built for this tokenizer's vocabulary)"
        )


def is_decoder_run(spec: str | Path) -> bool:
    """Whether a teacher-mode `model` spec names a training run (or checkpoint) of our decoder
    rather than a transformers model: such a run is converted by `tying.conversion.convert` on
    the decoder's own interface and final norm."""
    from tying.train.checkpoint import is_run_spec

    return is_run_spec(spec)


def teacher_run_config(spec: str | Path) -> TrainConfig:
    """The TrainConfig of a teacher given as a training run (`is_decoder_run`)."""
    from tying.train import checkpoint as ckpt
    from tying.train.config import saved_train_config

    folder = ckpt.resolve_checkpoint(spec)
    state = ckpt.read_trainer_state(folder)
    return saved_train_config(state["config"], source=str(folder / "trainer.json"))


def tokenizer_spec(cfg: TrainConfig) -> Any:
    """The `load_tokenizer` spec of a run: the teacher's in teacher mode (for a teacher that is
    a run of our decoder, that run's own), else `cfg.tokenizer`."""
    if cfg.model is None:
        return cfg.tokenizer
    if is_decoder_run(cfg.model):
        return tokenizer_spec(teacher_run_config(cfg.model))
    return cfg.model


def _load_decoder_run(spec: str) -> nn.Module:
    """Teacher mode from a run of our decoder: its newest checkpoint (converted in place on the
    decoder's own interface by `build_model`)."""
    from tying.train.restore import load_trained

    return load_trained(spec)[0]


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
    train_folder = _shards(source, tokenizer, info, cfg.max_documents, cfg.progress)
    val_store = None
    val_source = cfg.val_data if cfg.val_data is not None else default_validation_source()
    if val_source != "":
        val_folder = _shards(val_source, tokenizer, info, None, cfg.progress)
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
