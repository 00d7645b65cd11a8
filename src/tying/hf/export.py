"""Export a converted model as a standard transformers checkpoint (no `tying` needed to load it).

The interface is materialized into the architecture's own weights: E into the
embedding's `weight` (without embed_scale: the architecture applies it
itself), U = W_out^T into the head's `weight` (+ `bias`). A PIT or untied
model exports untied (`tie_word_embeddings = False`); a TT model exports tied
(`tie_word_embeddings = True`, one stored matrix). The config loses its
`tying` record, so plain `AutoModelForCausalLM.from_pretrained(out_dir)`
loads it and any runtime that reads transformers checkpoints can serve it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tying.conversion.model import unwrap_model
from tying.errors import InvalidInputError
from tying.hf.convert import interface_of
from tying.hf.families import get_adapter
from tying.hf.modules import INTERFACE_ATTR
from tying.hf.state import CONFIG_KEY


def _module_name(model: nn.Module, target: nn.Module) -> str:
    """The dotted name of `target` inside `model`."""
    for name, module in model.named_modules():
        if module is target:
            return name
    raise InvalidInputError(f"{type(target).__name__} is not a submodule of {type(model).__name__}")


def export(model: nn.Module, out_dir: str | Path, tokenizer: Any = None) -> Path:
    """Write `model` (converted) as a standard transformers checkpoint in `out_dir`.

    Args:
        model: a converted model (not peft-wrapped: merge adapters first with
            `merge_and_unload()`), or an HFCausalLM around one.
        out_dir: destination folder (created; existing files are overwritten).
        tokenizer: optional tokenizer saved alongside (`save_pretrained`).

    Returns:
        The output folder.

    Raises:
        ValueError: the model is not converted, or still carries peft adapters.
    """
    if hasattr(model, "peft_config"):
        raise InvalidInputError(
            "this model carries peft adapters: merge them first (model = model.merge_and_unload()) "
            "and export the merged model"
        )
    inner = unwrap_model(model)
    if hasattr(inner, "peft_config"):
        raise InvalidInputError("merge peft adapters (merge_and_unload) before exporting")
    interface = interface_of(inner)
    adapter = get_adapter(inner)
    embed_name = _module_name(inner, adapter.input_embedding(inner))
    head_name = _module_name(inner, adapter.output_head(inner))

    state = {k: v for k, v in inner.state_dict().items() if not k.startswith(INTERFACE_ATTR + ".")}
    with torch.no_grad():
        state[f"{embed_name}.weight"] = interface.embedding_matrix().detach().clone().contiguous()
        if not interface.shares_matrix:
            state[f"{head_name}.weight"] = (
                interface.unembedding_matrix().detach().clone().contiguous()
            )
        if interface.bias is not None:
            state[f"{head_name}.bias"] = interface.bias.detach().clone()

    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    config = inner.config
    had_record = hasattr(config, CONFIG_KEY)
    record = getattr(config, CONFIG_KEY, None)
    tie_flag = config.tie_word_embeddings
    try:
        if had_record:
            delattr(config, CONFIG_KEY)
        config.tie_word_embeddings = interface.shares_matrix
        inner.save_pretrained(out, state_dict=state)
    finally:
        config.tie_word_embeddings = tie_flag
        if had_record:
            setattr(config, CONFIG_KEY, record)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


def __getattr__(name: str) -> Any:
    if name == "load_for_export":  # moved to the loader layer (hf imports nothing of train)
        from tying._compat import moved_attribute

        return moved_attribute("tying.hf.export", name, "tying.loader")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
