"""Models for evaluation: any spec the project loads, as a transformers causal LM and tokenizer.

`load_for_evaluation(spec, adapter=..., dtype=...)` resolves SPEC with the project's one model
resolver (`load_any`: a training run or checkpoint, "smollm2", a .gguf file, a transformers
folder, converted or not, or a hub id) and returns what `generate`, lm-eval and peft need:

- a `transformers` causal LM: the converted transformers model of an HF spec or teacher-mode
  run (`HFCausalLM.hf_model`), or a `TyingForCausalLM` around the `Decoder` of a scratch run
  (sharing its tensors, no copy);
- a fast transformers tokenizer built on the model's `TextTokenizer` (same Rust backend, so
  the same ids; its EOS is the project's end-of-document token);
- optionally a peft adapter folder applied on top (`tying.adapters.apply_adapter`: peft's
  `PeftModel.from_pretrained` after `check_adapter_base` accepted it: the adapter's record of
  its base model, tying_adapter.json, must match this model).

Adapter files, records and checks live in `tying.adapters` (shared with `tying.update`, which
writes them); `causal_lm_of`, `read_adapter_config`, `check_adapter_base` and `apply_adapter`
are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tying.adapters import apply_adapter, causal_lm_of, check_adapter_base, read_adapter_config
from tying.errors import InvalidInputError
from tying.hf.native import hf_tokenizer_of  # re-exported
from tying.loader import load_any

__all__ = [
    "DTYPES",
    "EvalModel",
    "apply_adapter",
    "causal_lm_of",
    "check_adapter_base",
    "hf_tokenizer_of",
    "load_for_evaluation",
    "parse_dtype",
    "read_adapter_config",
]

#: dtype names accepted by `parse_dtype` (and `--dtype`).
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


@dataclass
class EvalModel:
    """A model ready for evaluation.

    Attributes:
        model: a transformers causal LM (with `generate`), possibly a `peft.PeftModel`, in eval
            mode.
        tokenizer: its fast transformers tokenizer.
        name: a short file-system-safe name.
        spec: the spec it was loaded from.
        adapter: the adapter folder applied on top, or None.
    """

    model: nn.Module
    tokenizer: Any
    name: str
    spec: str
    adapter: str | None = None


def parse_dtype(value: str | torch.dtype) -> torch.dtype:
    """A torch dtype from a name in `DTYPES` (or a dtype, returned as is).

    Raises:
        ValueError: an unknown name.
    """
    if isinstance(value, torch.dtype):
        return value
    key = str(value).lower().removeprefix("torch.")
    if key not in DTYPES:
        raise InvalidInputError(f"unknown dtype {value!r}: use one of {', '.join(DTYPES)}")
    return DTYPES[key]


def load_for_evaluation(
    spec: str | Path,
    *,
    adapter: str | Path | None = None,
    dtype: str | torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> EvalModel:
    """Load SPEC (and ADAPTER) for generation and scoring.

    Args:
        spec: a run or checkpoint folder, "smollm2", a .gguf file, a transformers folder or a
            Hugging Face Hub id (see `tying.loader.load_any`).
        adapter: a peft adapter folder to apply, or None.
        dtype: weights dtype ("float32", "bfloat16", ...).
        device: where the model runs.

    Returns:
        The `EvalModel`, in eval mode, on `device`.

    Raises:
        FileNotFoundError: a missing spec or adapter folder.
        ValueError: a model without a tokenizer, an unknown dtype, an adapter that does not fit.
    """
    if adapter is not None:
        read_adapter_config(adapter)  # fail on a bad adapter before the (slow) model load
    loaded = load_any(spec, parse_dtype(dtype))
    if loaded.tokenizer is None:
        raise InvalidInputError(
            f"model {spec} has no tokenizer: save one beside it (tokenizer.json, e.g. with "
            "tokenizer.save_pretrained) or evaluate a folder that has one"
        )
    tokenizer = hf_tokenizer_of(loaded.tokenizer)
    model = causal_lm_of(loaded.model, eos_token_id=tokenizer.eos_token_id)
    if adapter is not None:
        model = apply_adapter(model, adapter)
    model.to(device).eval()
    return EvalModel(
        model=model,
        tokenizer=tokenizer,
        name=loaded.name,
        spec=str(spec),
        adapter=None if adapter is None else str(adapter),
    )
