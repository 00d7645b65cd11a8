"""The record of a conversion kept in `config.tying`, and interfaces rebuilt from it.

A converted model's `config.tying` is a JSON-able dict:

    {"format": 1, "tie": "pit", "vocab_size": V, "d_model": d, "bias": false,
     "embed_scale": 1.0, "options": {...constructor keyword arguments...},
     "report": {...ConversionReport...}}

`interface_record` writes the interface part of it; `empty_interface` builds
an interface of the recorded type and shapes whose `load_state_dict` then
restores the saved tensors exactly (for PIT only `z` and `l_param`, + `bias`, + `input_bias`
when its options record `centred`).
"""

from __future__ import annotations

from typing import Any

import torch

from tying.errors import InvalidInputError
from tying.interface import TokenInterface, interface_class, tie_of, ties

#: Version of the `config.tying` record.
RECORD_FORMAT = 1
#: Name of the record in the model config.
CONFIG_KEY = "tying"


def interface_record(interface: TokenInterface, embed_scale: float) -> dict[str, Any]:
    """The interface part of `config.tying` (see the module docstring)."""
    return {
        "format": RECORD_FORMAT,
        "tie": tie_of(interface),
        "vocab_size": interface.vocab_size,
        "d_model": interface.d_model,
        "bias": interface.bias is not None,
        "embed_scale": float(embed_scale),
        "options": interface.options(),
    }


def empty_interface(record: dict[str, Any], dtype: torch.dtype = torch.float32) -> TokenInterface:
    """An interface of the recorded type and shapes, with placeholder values.

    Load the saved state into it with `load_state_dict(..., strict=True)`.
    PIT gets Z = the first d columns of the identity and L = I (valid placeholders).

    Raises:
        ValueError: the record is not a `config.tying` record this version can read.
    """
    if not isinstance(record, dict) or "tie" not in record:
        raise InvalidInputError(f"not a tying record (config.{CONFIG_KEY}): {record!r}")
    fmt = record.get("format", RECORD_FORMAT)
    if fmt > RECORD_FORMAT:
        raise InvalidInputError(
            f"config.{CONFIG_KEY} has format {fmt}, this version of tying reads up to "
            f"{RECORD_FORMAT}: upgrade tying"
        )
    V, d = int(record["vocab_size"]), int(record["d_model"])
    tie = record["tie"]
    if tie not in ties():
        raise InvalidInputError(f"config.{CONFIG_KEY}['tie'] must be one of {ties()}, got {tie!r}")
    options = dict(record.get("options", {}))
    if record.get("input_bias"):  # records written by the teacher branch before `centred`
        options.setdefault("centred", True)
    return interface_class(tie).placeholder(
        V, d, dtype=dtype, bias=bool(record.get("bias")), **options
    )
