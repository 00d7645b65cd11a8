"""The one model resolver: any model SPEC -> model + tokenizer + kind (`resolve_model`).

A SPEC is, tried in this order:

- a training run folder (holding ``checkpoints/``), a ``checkpoints/`` folder or one
  checkpoint folder (holding ``trainer.json``), as `tying.train.checkpoint.is_run_spec` says:
  kind ``"run"``, the run's model rebuilt from its saved config (`build_model`) with the
  checkpoint's weights (a `tying.decoder.Decoder`, or an `HFCausalLM` for a teacher-mode run)
  and the run's `TextTokenizer`;
- anything `tying.hf.load` accepts: ``"smollm2"``, a ``.gguf`` file, a transformers folder
  (converted by tying or not: a native PIT folder is one), a Hugging Face Hub id: kind
  ``"hf"``, the transformers model as loaded and its tokenizer (None without tokenizer files).

Every consumer goes through it: `tying.load` (`tying.loader.load_any`), a teacher-mode run's
model (`build_model`), the distillation teacher (`tying.train.distill.load_teacher`) and
`tying convert` (`tying.teacher.step0.convert_spec`). `as_interface_model` turns what it
returns into an `InterfaceModel` with unchanged logits (a plain transformers model converted
in place, "tt" when its embedding and head are one tensor, "untied" otherwise).

`build_model` lives here, not in `tying.train.build`, because the two call each other: a run
is rebuilt by `build_model`, and a teacher-mode run's teacher may itself be a run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tying.data.tokenizer import load_tokenizer
from tying.decoder import Decoder, ModelConfig, preset_config
from tying.errors import InvalidInputError
from tying.hf import HFCausalLM, convert, is_converted, load
from tying.hf.convert import REPORT_ATTR
from tying.interface import build_interface, interface_class, is_interface_model
from tying.train import checkpoint as ckpt
from tying.train.config import TrainConfig, saved_train_config

#: The kinds `resolve_model` returns.
RESOLVED_KINDS = ("run", "hf")


@dataclass
class ResolvedModel:
    """A model SPEC resolved (`resolve_model`).

    Attributes:
        model: kind "run": the run's model in eval mode (a `Decoder`, or an `HFCausalLM` for a
            teacher-mode run); kind "hf": the transformers causal LM as loaded, in eval mode
            (converted or not).
        tokenizer: "run": the run's `TextTokenizer`; "hf": the transformers tokenizer, or None
            for a folder without tokenizer files.
        kind: "run" or "hf".
        spec: the spec as given.
        checkpoint: the checkpoint folder of a run, else None.
        train_config: the `TrainConfig` of a run, else None.
    """

    model: nn.Module
    tokenizer: Any
    kind: str
    spec: str
    checkpoint: Path | None = None
    train_config: TrainConfig | None = None


def resolve_model(
    spec: str | Path, dtype: torch.dtype = torch.float32, *, cache: bool = True
) -> ResolvedModel:
    """Load the model a SPEC names (see the module docstring).

    Args:
        spec: a run, `checkpoints/` or checkpoint folder; "smollm2", a .gguf file, a
            transformers folder or a Hugging Face Hub id.
        dtype: dtype of the weights (a run is rebuilt in float32, then cast).
        cache: keep/read a safetensors copy of a dequantized GGUF model (`tying.hf.load`).

    Returns:
        The `ResolvedModel`, on the CPU, in eval mode.

    Raises:
        FileNotFoundError: a path that does not exist, a run without checkpoints.
        ValueError: a damaged checkpoint, an unsupported file.
    """
    text = str(spec)
    if ckpt.is_run_spec(text):
        model, tokenizer, cfg, folder = load_trained(text)
        if dtype != torch.float32:
            model = model.to(dtype)
        return ResolvedModel(model, tokenizer, "run", text, folder, cfg)
    model, tokenizer = load(text, dtype, cache=cache)
    return ResolvedModel(model, tokenizer, "hf", text)


def load_trained(path: str | Path) -> tuple[nn.Module, Any, TrainConfig, Path]:
    """(model in eval mode, tokenizer, its TrainConfig, checkpoint folder) of a run or checkpoint."""
    folder = ckpt.resolve_checkpoint(path)
    model_state = ckpt.load_model_state(folder)
    cfg = saved_run_config(folder)
    tokenizer = load_tokenizer(tokenizer_spec(cfg))
    model = build_model(cfg, tokenizer.vocab_size)
    model.load_state_dict(model_state)
    model.eval()
    return model, tokenizer, cfg, folder


def saved_run_config(spec: str | Path) -> TrainConfig:
    """The `TrainConfig` a run (or checkpoint) was trained with, from its ``trainer.json``."""
    folder = ckpt.resolve_checkpoint(spec)
    state = ckpt.read_trainer_state(folder)
    return saved_train_config(state["config"], source=str(folder / "trainer.json"))


def is_tied(model: nn.Module) -> bool:
    """Whether a transformers model's input embedding and output head share one weight."""
    embedding = model.get_input_embeddings()
    head = model.get_output_embeddings()
    e = getattr(embedding, "weight", None)
    u = getattr(head, "weight", None)
    return isinstance(e, Tensor) and isinstance(u, Tensor) and e.data_ptr() == u.data_ptr()


def as_interface_model(model: nn.Module) -> nn.Module:
    """`model` as an `InterfaceModel` with the logits it has now.

    Our models (a `Decoder`, an `HFCausalLM`) are returned as they are; the `TyingForCausalLM`
    around a `Decoder` gives its decoder; a transformers causal LM is wrapped in `HFCausalLM`,
    converted IN PLACE first if it is not yet ("tt" when tied, "untied" otherwise: logits
    unchanged either way).

    Raises:
        ValueError: neither a tying model nor a transformers causal LM.
    """
    inner = getattr(model, "model", None)
    if not is_interface_model(model) and is_interface_model(inner):
        return inner  # TyingForCausalLM (model_type "tying") around our Decoder
    if is_interface_model(model):
        return model
    if not hasattr(model, "config") or not hasattr(model, "get_input_embeddings"):
        raise InvalidInputError(
            f"{type(model).__name__} is neither a tying model (interface, final_norm, "
            "blocks, residual_states) nor a transformers causal LM"
        )
    if not is_converted(model):
        convert(model, tie="tt" if is_tied(model) else "untied")
    return HFCausalLM(model)


def tokenizer_spec(cfg: TrainConfig) -> Any:
    """The `load_tokenizer` spec of a run: the teacher's in teacher mode (for a teacher that is
    a run of our decoder, that run's own), else `cfg.tokenizer`."""
    if cfg.model is None:
        return cfg.tokenizer
    if ckpt.is_run_spec(cfg.model):
        return tokenizer_spec(saved_run_config(cfg.model))
    return cfg.model


def build_model(
    cfg: TrainConfig,
    vocab_size: int,
    *,
    calibration: Callable[[int], list[tuple[torch.Tensor, torch.Tensor]]] | None = None,
    measure: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> nn.Module:
    """The model of a run: a decoder preset (scratch) or a converted teacher (teacher mode).

    The interface's own options come from the run's section of it (`TrainConfig.tt`,
    `.pit`, ...: `TrainConfig.interface_keywords`), whatever the interface. In teacher mode
    the teacher is `resolve_model(cfg.model)`: a transformers model (converted, then wrapped in
    `HFCausalLM`) or a training run of our decoder (converted on its own interface).

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
        teacher = resolve_model(cfg.model)
        report = convert(
            teacher.model,
            tie=cfg.tie,
            calibration=calibration,
            measure=measure,
            fit_options=cfg.pit.fit,
            progress=cfg.progress,
            **options,
        )
        if teacher.kind == "run":  # kept as a transformers model keeps it (`conversion_report`)
            setattr(teacher.model, REPORT_ATTR, report)
            return teacher.model.train()
        return HFCausalLM(teacher.model)
    return _scratch_model(cfg, vocab_size, options)


def _scratch_model(cfg: TrainConfig, vocab_size: int, options: dict[str, Any]) -> Decoder:
    """A fresh decoder of `cfg.preset` (deterministic given `cfg.seed`).

    Keywords the model config carries (its flat keys, `config_options`) go through it; the
    rest (PIT's t_scale) to an interface built here.
    """
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
