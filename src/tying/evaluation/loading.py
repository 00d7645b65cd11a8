"""Models for evaluation: any spec the project loads, as a transformers causal LM and tokenizer.

`load_for_evaluation(spec, adapter=..., dtype=...)` resolves SPEC with the project's one model
resolver (`load_any`: a training run or checkpoint, "smollm2", a .gguf file, a transformers
folder, converted or not, or a hub id) and returns what `generate`, lm-eval and peft need:

- a `transformers` causal LM: the converted transformers model of an HF spec or teacher-mode
  run (`HFCausalLM.hf_model`), or a `TyingForCausalLM` around the `Decoder` of a scratch run
  (sharing its tensors, no copy);
- a fast transformers tokenizer built on the model's `TextTokenizer` (same Rust backend, so
  the same ids; its EOS is the project's end-of-document token);
- optionally a peft adapter folder applied on top (`peft.PeftModel.from_pretrained`), after
  `check_adapter_base` accepted it.

This module is the only place in `tying.evaluation` that imports the resolver.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tying.decoder import Decoder
from tying.hf import HFCausalLM, TyingForCausalLM
from tying.loader import load_any

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
        raise ValueError(f"unknown dtype {value!r}: use one of {', '.join(DTYPES)}")
    return DTYPES[key]


def hf_tokenizer_of(tokenizer: Any) -> Any:
    """A transformers fast tokenizer for a `TextTokenizer` (or a transformers tokenizer, as is).

    The Rust backend is shared, so both give the same ids; EOS is the `TextTokenizer`'s
    end-of-document token; padding is left unset (lm-eval picks one: UNK, else EOS).
    """
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

    if isinstance(tokenizer, PreTrainedTokenizerBase):
        return tokenizer
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer.backend, eos_token=tokenizer.eos_token
    )
    fast.name_or_path = tokenizer.name
    return fast


def causal_lm_of(module: nn.Module, eos_token_id: int | None = None) -> nn.Module:
    """The transformers causal LM behind a model that `load_any` returned.

    Args:
        module: an `HFCausalLM` (its `hf_model` is returned), a `Decoder` (wrapped in a
            `TyingForCausalLM` that shares its tensors), or already a transformers causal LM.
        eos_token_id: end-of-sequence id written into a new `TyingForCausalLM`'s config.

    Raises:
        ValueError: a module of another kind.
    """
    if isinstance(module, HFCausalLM):
        return module.hf_model
    if isinstance(module, Decoder):
        wrapper = TyingForCausalLM.from_decoder(
            module, eos_token_id=eos_token_id, pad_token_id=eos_token_id
        )
        return wrapper.eval()
    if hasattr(module, "generate") and hasattr(module, "config"):
        return module
    raise ValueError(
        f"cannot evaluate a {type(module).__name__}: expected a tying Decoder, an HFCausalLM or "
        "a transformers causal LM"
    )


def read_adapter_config(adapter_dir: str | Path) -> dict[str, Any]:
    """The `adapter_config.json` of a peft adapter folder.

    Raises:
        FileNotFoundError: no such folder, or no adapter_config.json in it.
        ValueError: the file is not a JSON object.
    """
    folder = Path(adapter_dir).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(
            f"adapter folder {folder} does not exist: pass a peft adapter folder"
        )
    path = folder / "adapter_config.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{folder} has no adapter_config.json: pass a folder written by peft's save_pretrained"
        )
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{path} is not valid JSON ({e.msg} at line {e.lineno}): rewrite it"
        ) from e
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(config).__name__}")
    return config


def _adapter_tensor_shapes(adapter_dir: Path) -> dict[str, tuple[int, ...]]:
    """Shapes of the tensors in adapter_model.safetensors (read from its header), or {}."""
    path = adapter_dir / "adapter_model.safetensors"
    if not path.is_file():
        return {}
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}  # noqa: SIM118


def check_adapter_base(adapter_dir: str | Path, loaded_model: nn.Module) -> None:
    """Refuse an adapter that was not trained on `loaded_model`'s architecture.

    HOOK: the adapter record (which base model an update was trained on) is being designed;
    its identity check belongs here. What is checked now, from peft's own files: every LoRA
    matrix in adapter_model.safetensors names a module of `loaded_model` whose input/output
    sizes match it (lora_A: (r, in_features), lora_B: (out_features, r)).

    Args:
        adapter_dir: a peft adapter folder (adapter_config.json, adapter_model.safetensors).
        loaded_model: the transformers model the adapter is about to be applied to.

    Raises:
        FileNotFoundError / ValueError: see `read_adapter_config`.
        ValueError: a LoRA matrix for a module the model lacks, or of the wrong size.
    """
    folder = Path(adapter_dir).expanduser()
    read_adapter_config(folder)
    modules = dict(loaded_model.named_modules())
    for key, shape in _adapter_tensor_shapes(folder).items():
        for side in ("lora_A", "lora_B"):
            marker = f".{side}."
            if marker not in key:
                continue
            name = key.split(marker)[0].removeprefix("base_model.model.")
            module = modules.get(name)
            if module is None:
                raise ValueError(
                    f"adapter {folder} has weights for module {name!r}, which the model lacks: "
                    "it was trained on another base model; evaluate it with its own base"
                )
            expected = getattr(module, "in_features" if side == "lora_A" else "out_features", None)
            got = shape[1] if side == "lora_A" else shape[0]
            if expected is not None and got != expected:
                raise ValueError(
                    f"adapter {folder} does not fit module {name!r} ({side} has size {got}, the "
                    f"model's is {expected}): it was trained on another base model"
                )


def apply_adapter(model: nn.Module, adapter_dir: str | Path) -> nn.Module:
    """`model` under the peft adapter in `adapter_dir` (checked by `check_adapter_base` first).

    Raises:
        FileNotFoundError / ValueError: see `check_adapter_base`; also a ValueError when peft
            cannot load the adapter.
    """
    from peft import PeftModel

    folder = Path(adapter_dir).expanduser()
    check_adapter_base(folder, model)
    try:
        wrapped = PeftModel.from_pretrained(model, str(folder), is_trainable=False)
    except (RuntimeError, ValueError, KeyError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"could not apply adapter {folder} ({first}): is it for this base model?"
        ) from e
    return wrapped.eval()


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
        raise ValueError(
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
