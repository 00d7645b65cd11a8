"""Native save/load of converted models: `model.save_pretrained(dir)` then `from_pretrained(dir)`.

`save_pretrained` of a converted model needs nothing special: its state dict
holds the interface once, under `tying_interface.` (for PIT only `z` and
`l_param`, + `bias`; E and W_out are not stored), next to the untouched
trunk weights, and `config.json` carries the `tying` record. Plain
`AutoModelForCausalLM.from_pretrained` cannot rebuild the interface from
that folder (it would initialize a fresh embedding and head); use
`tying.hf.from_pretrained`, which loads the trunk through transformers and
then installs the saved interface.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import Tensor, nn

from tying.conversion.report import ConversionReport
from tying.errors import InvalidInputError, MissingFileError, read_json
from tying.hf.convert import REPORT_ATTR, install_interface
from tying.hf.families import get_adapter
from tying.hf.modules import INTERFACE_ATTR
from tying.hf.state import CONFIG_KEY, empty_interface

_PREFIX = INTERFACE_ATTR + "."
#: Files whose presence means a folder holds a tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def read_record(folder: str | Path) -> dict[str, Any] | None:
    """The `tying` record of `folder/config.json`, or None (no record, or no config)."""
    config_file = Path(folder) / "config.json"
    if not config_file.is_file():
        return None
    config = read_json(config_file, "model config")
    record = config.get(CONFIG_KEY) if isinstance(config, dict) else None
    return record if isinstance(record, dict) else None


def is_converted_folder(folder: str | Path) -> bool:
    """Whether `folder` was saved from a converted model (its config has a `tying` record)."""
    return read_record(folder) is not None


def _safetensors_files(folder: Path) -> list[Path]:
    """The weight files of a transformers checkpoint folder (single or sharded)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [folder / s for s in shards]
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    raise MissingFileError(
        f"no model.safetensors (or sharded index) in {folder}: expected a folder written by "
        "save_pretrained of a converted model"
    )


def read_interface_state(folder: str | Path) -> dict[str, Tensor]:
    """The saved interface tensors of a converted folder, keys without the `tying_interface.` prefix."""
    state: dict[str, Tensor] = {}
    for file in _safetensors_files(Path(folder)):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if key.startswith(_PREFIX):
                    state[key[len(_PREFIX) :]] = f.get_tensor(key)
    if not state:
        raise InvalidInputError(
            f"{folder} has a tying record in config.json but no '{_PREFIX}*' tensors in its weights"
        )
    return state


def load_tokenizer(folder: str | Path) -> Any:
    """The tokenizer saved in `folder` (AutoTokenizer), or None when it has no tokenizer files."""
    folder = Path(folder)
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


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


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' info/warning logs (expected missing/unexpected keys) for a block."""
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)


def from_pretrained(
    folder: str | Path, *, dtype: torch.dtype | None = None, **kwargs: Any
) -> nn.Module:
    """Load a converted model saved with `save_pretrained` (or `tying convert --out`).

    The trunk is loaded by `AutoModelForCausalLM.from_pretrained` (its
    embedding and head, absent from the folder, are initialized and then
    replaced), the interface is rebuilt from `config.tying` and its saved
    tensors restored exactly.

    Args:
        folder: a local folder with config.json (holding a `tying` record) and safetensors weights.
        dtype: dtype of the loaded model (interface included); default: as saved.
        kwargs: passed to `AutoModelForCausalLM.from_pretrained` (e.g. `device_map`).

    Raises:
        FileNotFoundError: no such folder or no weights in it.
        ValueError: the folder was not saved from a converted model.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise MissingFileError(f"no such folder: {folder}")
    record = read_record(folder)
    if record is None:
        raise InvalidInputError(
            f"{folder} was not saved from a converted model (config.json has no '{CONFIG_KEY}' "
            "record): load it with transformers.AutoModelForCausalLM.from_pretrained or "
            "tying.hf.load, then convert it"
        )
    state = read_interface_state(folder)
    config = AutoConfig.from_pretrained(folder)
    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(folder, config=config, dtype=dtype, **kwargs)
    interface = empty_interface(record, dtype=next(iter(state.values())).dtype)
    interface.load_state_dict(state, strict=True)
    ref = next(p for n, p in model.named_parameters() if not n.startswith(_PREFIX))
    interface.to(device=ref.device, dtype=dtype if dtype is not None else None)
    install_interface(model, interface, get_adapter(model), float(record.get("embed_scale", 1.0)))
    setattr(model.config, CONFIG_KEY, record)
    report = record.get("report")
    if isinstance(report, dict):
        setattr(model, REPORT_ATTR, ConversionReport(**report))
    return model
