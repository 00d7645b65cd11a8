"""Every analysis verb's model: `load_any(spec)` -> a `LoadedModel`.

A SPEC is resolved by the one model resolver, `tying.train.resolve.resolve_model`:

- a training run folder (holding ``checkpoints/``), a ``checkpoints/`` folder or one
  checkpoint folder (holding ``trainer.json``): the run's model (a `Decoder`, or an
  `HFCausalLM` for teacher-mode runs);
- anything `tying.hf.load` accepts: ``"smollm2"``, a ``.gguf`` file, a transformers folder
  (converted or not), a Hugging Face Hub id. A model that is not converted yet is converted
  in place with the tie that leaves its logits unchanged (`tying.train.resolve.
  as_interface_model`: ``"tt"`` when its embedding and head are one tensor, ``"untied"``
  otherwise); then wrapped in `HFCausalLM`.

Whatever the source, the analysis code sees one object with

    model.interface            the TokenInterface (E, W_out)
    model.final_norm           the norm before the head
    model.residual_states(ids) [x_0, ..., x_L], n_layers + 1 tensors (B, T, d), before the norm
    model.final_hidden(ids)    final_norm(x_L), (B, T, d)

and `LoadedModel.logits_from_hidden(h)` / `LoadedModel.lens_logits(x)` apply the head exactly
as the model does (the interface, then the architecture's logit soft-capping if any;
embedding scales act on the input side only and are part of x_0 already).

The tokenizer is normalized to a `tying.data.tokenizer.TextTokenizer` (encode/decode without
special tokens, `vocab_size`, the vocabulary strings), the type the data path consumes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tying.data.tokenizer import TextTokenizer, load_tokenizer, wrap_tokenizer
from tying.errors import InvalidInputError, MissingFileError
from tying.hf import HFCausalLM, from_pretrained, is_converted_folder, load
from tying.hf.native import load_tokenizer as load_saved_tokenizer
from tying.hf.state import CONFIG_KEY
from tying.interface import InterfaceModel, TokenInterface
from tying.train.checkpoint import is_run_spec as is_run_spec  # re-exported
from tying.train.checkpoint import resolve_checkpoint
from tying.train.resolve import as_interface_model, load_trained, resolve_model

#: The kinds of `LoadedModel.kind`.
MODEL_KINDS = ("run", "hf", "module")


#: The record `tying add-tokens` writes into the folder of a model it grew.
ADDED_TOKENS_RECORD = "add_tokens.json"


def vocab_size_before_added_tokens(spec: str | Path) -> int | None:
    """V_old of a model folder written by `tying add-tokens` (its add_tokens.json): the ids
    below it are the old tokens; None for any other spec."""
    import json

    record = Path(spec).expanduser() / ADDED_TOKENS_RECORD
    if not record.is_file():
        return None
    return int(json.loads(record.read_text(encoding="utf-8"))["vocab_size"]["before"])


def safe_name(text: str) -> str:
    """A file-system-safe name: characters outside [A-Za-z0-9._-] become '-' (e.g. hub ids)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text.replace("/", "--")).strip("-.")
    return cleaned or "model"


def _run_name(checkpoint: Path, spec: str) -> str:
    """`<run folder name>` for a run spec, `<run>-step-N` for a checkpoint spec."""
    run_dir = checkpoint.parent.parent
    if (Path(spec).expanduser() / "trainer.json").is_file():
        step = checkpoint.name.removeprefix("step-").lstrip("0") or "0"
        return safe_name(f"{run_dir.name}-step-{step}")
    return safe_name(run_dir.name)


def _model_name(spec: str) -> str:
    """A short name for an HF spec: the named model, the file stem, the folder name or the hub id."""
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        return safe_name(path.stem)
    if path.is_dir():
        return safe_name(path.resolve().name)
    return safe_name(spec)


@dataclass
class LoadedModel:
    """A model ready for lenses, traces and probes.

    Attributes:
        model: a `tying.decoder.decoder.Decoder` or a `tying.hf.HFCausalLM` (or any module with
            `.interface`, `.final_norm`, `residual_states(ids)`, `final_hidden(ids)`), in eval mode.
        tokenizer: its tokenizer as a `TextTokenizer`, or None (a folder without tokenizer files).
        name: a short file-system-safe name (for plots, JSON and output folders).
        kind: "run" (a training checkpoint), "hf" (a transformers model) or "module" (wrapped
            from memory by `wrap_model`).
        spec: the spec it was loaded from ("" for `wrap_model`).
        checkpoint: the checkpoint folder of a run, else None.
        train_config: the `TrainConfig` of a run, else None.
    """

    model: InterfaceModel
    tokenizer: TextTokenizer | None
    name: str
    kind: str
    spec: str = ""
    checkpoint: Path | None = None
    train_config: Any = None

    # ------------------------------------------------------------ structure
    @property
    def interface(self) -> TokenInterface:
        """The token interface."""
        return self.model.interface

    @property
    def final_norm(self) -> nn.Module:
        """The norm applied to the last residual state before the head."""
        return self.model.final_norm

    @property
    def n_layers(self) -> int:
        """L, the number of blocks."""
        return len(self.model.blocks)

    @property
    def n_entries(self) -> int:
        """L + 1: residual entries (0 = embedding output, i = output of block i)."""
        return self.n_layers + 1

    @property
    def d_model(self) -> int:
        """d."""
        return self.interface.d_model

    @property
    def vocab_size(self) -> int:
        """V, rows of the interface (may exceed the tokenizer's size: padded rows)."""
        return self.interface.vocab_size

    @property
    def logit_softcap(self) -> float | None:
        """The soft-capping c of the head (logits <- c·tanh(logits/c)), or None."""
        cap = getattr(self.model, "logit_softcap", None)
        return float(cap) if cap else None

    @property
    def device(self) -> torch.device:
        """Device of the interface's first tensor."""
        for tensor in self.interface.parameters():
            return tensor.device
        for tensor in self.interface.buffers():
            return tensor.device
        return torch.device("cpu")

    def to(self, device: torch.device | str) -> LoadedModel:
        """Move the model to `device` (in place); returns self."""
        self.model.to(device)
        return self

    # ------------------------------------------------------------ heads
    def logits_from_hidden(self, hidden: Tensor) -> Tensor:
        """Logits of states after the final norm: (..., d) -> (..., V), as the model's head does.

        interface.logits(hidden), then c·tanh(logits / c) when the architecture soft-caps.
        """
        logits = self.interface.logits(hidden)
        cap = self.logit_softcap
        if cap is not None:
            logits = cap * torch.tanh(logits / cap)
        return logits

    def lens_logits(self, state: Tensor) -> Tensor:
        """Logit lens of residual states: (..., d) -> (..., V) = head(final_norm(state))."""
        return self.logits_from_hidden(self.final_norm(state))

    # ------------------------------------------------------------ forward passes
    def states_and_final(self, input_ids: Tensor) -> tuple[list[Tensor], Tensor]:
        """One forward pass: the residual states and the hidden state the model's head reads.

        Args:
            input_ids: (B, T) token ids.

        Returns:
            (states, final): states = [x_0, ..., x_L], L + 1 tensors (B, T, d) before the final
            norm; final (B, T, d) = the output of the model's own final norm, captured by a hook
            during the forward pass (for a `Decoder`, whose `residual_states` stops before the
            norm, final_norm(x_L), which is how its `final_hidden` is defined).
        """
        captured: list[Tensor] = []

        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            captured.append(output[0] if isinstance(output, tuple) else output)

        handle = self.final_norm.register_forward_hook(hook)
        try:
            states = self.model.residual_states(input_ids)
        finally:
            handle.remove()
        final = captured[-1] if captured else self.final_norm(states[-1])
        if len(states) != self.n_entries:
            raise RuntimeError(
                f"residual_states returned {len(states)} tensors, expected n_layers + 1 = "
                f"{self.n_entries}"
            )
        return list(states), final


def as_text_tokenizer(tokenizer: Any, name: str) -> TextTokenizer | None:
    """Normalize a tokenizer to a `TextTokenizer`.

    Accepts a `TextTokenizer` (returned as is), a transformers fast tokenizer (its
    `backend_tokenizer`, EOS from its `eos_token`), a `tokenizers.Tokenizer`, or None.

    Raises:
        ValueError: a slow (Python-only) transformers tokenizer, or no end-of-document token.
    """
    if tokenizer is None or isinstance(tokenizer, TextTokenizer):
        return tokenizer
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        return wrap_tokenizer(tokenizer, name)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(backend, Tokenizer):
        raise InvalidInputError(
            f"tokenizer {type(tokenizer).__name__} of {name} has no fast (Rust) backend; save "
            "a tokenizer.json next to the model or pass tokenizer=... (a load_tokenizer spec)"
        )
    eos = getattr(tokenizer, "eos_token", None)
    eos = eos if isinstance(eos, str) else getattr(eos, "content", None)
    return wrap_tokenizer(backend, name, eos)


def vocabulary_strings(tokenizer: TextTokenizer, size: int | None = None) -> list[str]:
    """Token strings by id: entry i is the vocabulary string of id i (e.g. "Ġthe" for GPT-2).

    Args:
        tokenizer: the tokenizer.
        size: length of the list (default tokenizer.vocab_size); ids without a token (gaps,
            or padded model rows past the tokenizer) get "".

    Returns:
        A list of `size` strings, the raw vocabulary entries (not decoded text).
    """
    n = tokenizer.vocab_size if size is None else int(size)
    backend = tokenizer.backend
    return [backend.id_to_token(i) or "" for i in range(n)]


def wrap_model(
    model: nn.Module,
    tokenizer: Any = None,
    name: str = "model",
    kind: str = "module",
) -> LoadedModel:
    """A `LoadedModel` around a model in memory.

    Args:
        model: a `Decoder` (or the `TyingForCausalLM` around one), an `HFCausalLM`, a
            converted transformers model, or a plain transformers causal LM. A plain one is
            converted IN PLACE with the tie that keeps
            its logits unchanged ("tt" when tied, "untied" otherwise) and wrapped in `HFCausalLM`.
        tokenizer: a `TextTokenizer`, a transformers fast tokenizer, or None.
        name: its name.
        kind: see `LoadedModel.kind`.

    Raises:
        ValueError: the model has neither the decoder API nor a supported transformers
            architecture.
    """
    model = as_interface_model(model)
    model.eval()
    return LoadedModel(
        model=model, tokenizer=as_text_tokenizer(tokenizer, name), name=name, kind=kind
    )


def load_any(
    spec: str | Path,
    dtype: torch.dtype = torch.float32,
    *,
    tokenizer: Any = None,
    name: str | None = None,
) -> LoadedModel:
    """Load a run, a checkpoint or a Hugging Face model for analysis (see the module docstring).

    Args:
        spec: a run or checkpoint folder, "smollm2", a .gguf file, a transformers folder or a
            Hugging Face Hub id.
        dtype: dtype of the weights (runs are rebuilt in float32, then cast).
        tokenizer: override the model's tokenizer (a `load_tokenizer` spec or a `TextTokenizer`).
        name: override the derived name.

    Returns:
        The `LoadedModel`, in eval mode, on the CPU.

    Raises:
        FileNotFoundError: a path that does not exist.
        ValueError: an unsupported architecture or tokenizer.
    """
    text = str(spec)
    override = load_tokenizer(tokenizer) if tokenizer is not None else None
    resolved = resolve_model(text, dtype)
    tok = resolved.tokenizer
    if resolved.kind == "run":
        model_name = name or _run_name(resolved.checkpoint, text)
    else:
        model_name = name or _model_name(text)
        if override is None:
            tok = as_text_tokenizer(tok, "smollm2" if text.lower() == "smollm2" else model_name)
    loaded = wrap_model(resolved.model, override or tok, model_name, resolved.kind)
    loaded.spec = text
    loaded.checkpoint = resolved.checkpoint
    loaded.train_config = resolved.train_config
    return loaded


def load_for_export(path: str | Path) -> tuple[nn.Module, Any]:
    """(converted model, tokenizer or None) from something `tying export` accepts.

    - a folder written by `tying convert --out` or by `save_pretrained` of a converted model;
    - a teacher-mode training run (or one of its checkpoints): the converted
      Hugging Face model with the trained weights, and the teacher's tokenizer.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: `path` is neither, or is a scratch-mode run (tying's own
            decoder has no standard transformers architecture to export to).
    """
    folder = Path(path).expanduser()
    if not folder.exists():
        raise MissingFileError(f"no such file or folder: {folder}")
    if folder.is_dir() and is_converted_folder(folder):
        return from_pretrained(folder), load_saved_tokenizer(folder)
    try:
        resolve_checkpoint(folder)
    except FileNotFoundError:
        raise InvalidInputError(
            f"{folder} is neither a converted model folder (config.json with a '{CONFIG_KEY}' "
            "record, as a conversion writes it) nor a training run with checkpoints"
        ) from None
    model, _, cfg, _ = load_trained(folder)
    if not isinstance(model, HFCausalLM):
        raise InvalidInputError(
            f"{folder} is a scratch-mode run of tying's own decoder, which has no standard "
            "transformers architecture; save it with tying.hf.TyingForCausalLM.save_pretrained "
            "(loads wherever tying is installed)"
        )
    _, tokenizer = load(cfg.model)
    return model.hf_model, tokenizer
