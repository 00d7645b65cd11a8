"""The record of a conversion kept in `config.tying`, and interfaces rebuilt from it.

A converted model's `config.tying` is a JSON-able dict:

    {"format": 1, "tie": "pit", "vocab_size": V, "d_model": d, "bias": false,
     "input_bias": false, "embed_scale": 1.0,
     "options": {...constructor keyword arguments...}, "report": {...ConversionReport...}}

`interface_record` writes the interface part of it; `empty_interface` builds
an interface of the recorded type and shapes whose `load_state_dict` then
restores the saved tensors exactly (for PIT only `z` and `l_param`, + `bias`
and `input_bias`). Records written before `input_bias` existed read as False.
"""

from __future__ import annotations

from typing import Any

import torch

from tying.interface.base import TokenInterface
from tying.interface.pit import PseudoInverseTying
from tying.interface.transpose import TransposeTying
from tying.interface.untied import Untied

#: Version of the `config.tying` record.
RECORD_FORMAT = 1
#: Name of the record in the model config.
CONFIG_KEY = "tying"


def tie_of(interface: TokenInterface) -> str:
    """ "untied", "tt" or "pit" for an interface instance."""
    if isinstance(interface, PseudoInverseTying):
        return "pit"
    if isinstance(interface, TransposeTying):
        return "tt"
    if isinstance(interface, Untied):
        return "untied"
    raise ValueError(
        f"unknown interface type {type(interface).__name__}: expected Untied, TransposeTying "
        "or PseudoInverseTying"
    )


def interface_options(interface: TokenInterface) -> dict[str, Any]:
    """The constructor keyword arguments (other than tensors) that rebuild `interface`."""
    options: dict[str, Any] = {"loss_chunk_size": interface.loss_chunk_size}
    if isinstance(interface, PseudoInverseTying):
        options.update(
            trainable_z=interface.trainable_z,
            diag_activation=interface.diag_activation,
            diag_clamp=list(interface.diag_clamp) if interface.diag_clamp else None,
            retraction_eps=interface.retraction_eps,
        )
    elif isinstance(interface, TransposeTying):
        options["input_grad_scale"] = interface.input_grad_scale
    return options


def interface_record(interface: TokenInterface, embed_scale: float) -> dict[str, Any]:
    """The interface part of `config.tying` (see the module docstring)."""
    return {
        "format": RECORD_FORMAT,
        "tie": tie_of(interface),
        "vocab_size": interface.vocab_size,
        "d_model": interface.d_model,
        "bias": interface.bias is not None,
        "input_bias": getattr(interface, "input_bias", None) is not None,
        "embed_scale": float(embed_scale),
        "options": interface_options(interface),
    }


def centred_placeholder(V: int, d: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A (V, d) matrix with orthonormal columns that each sum to zero (V > d): Helmert columns.

    Column j is (1, ..., 1, −(j+1), 0, ...) / sqrt((j+1)(j+2)) with j+1 leading ones.
    """
    if V <= d:
        raise ValueError(f"a centred memory needs V > d, got V={V}, d={d}")
    j = torch.arange(d, dtype=torch.float64)
    rows = torch.arange(V, dtype=torch.float64).unsqueeze(1)
    norm = ((j + 1) * (j + 2)).rsqrt()
    Z = torch.where(rows <= j, norm, torch.zeros(()))
    Z = torch.where(rows == j + 1, -(j + 1) * norm, Z)
    return Z.to(dtype)


def empty_interface(record: dict[str, Any], dtype: torch.dtype = torch.float32) -> TokenInterface:
    """An interface of the recorded type and shapes, with placeholder values.

    Load the saved state into it with `load_state_dict(..., strict=True)`.
    PIT gets Z = the first d columns of the identity and L = I (valid placeholders);
    with an input bias, Z = `centred_placeholder(V, d)` (columns summing to zero).

    Raises:
        ValueError: the record is not a `config.tying` record this version can read.
    """
    if not isinstance(record, dict) or "tie" not in record:
        raise ValueError(f"not a tying record (config.{CONFIG_KEY}): {record!r}")
    fmt = record.get("format", RECORD_FORMAT)
    if fmt > RECORD_FORMAT:
        raise ValueError(
            f"config.{CONFIG_KEY} has format {fmt}, this version of tying reads up to "
            f"{RECORD_FORMAT}: upgrade tying"
        )
    V, d = int(record["vocab_size"]), int(record["d_model"])
    options = dict(record.get("options", {}))
    bias = torch.zeros(V, dtype=dtype) if record.get("bias") else None
    tie = record["tie"]
    if tie == "untied":
        zeros = torch.zeros(V, d, dtype=dtype)
        return Untied(zeros, zeros, bias=bias, **options)
    if tie == "tt":
        return TransposeTying(torch.zeros(V, d, dtype=dtype), bias=bias, **options)
    if tie == "pit":
        if options.get("diag_clamp") is not None:
            options["diag_clamp"] = tuple(options["diag_clamp"])
        if record.get("input_bias"):
            Z = centred_placeholder(V, d, dtype)
            input_bias = torch.zeros(d, dtype=dtype)
        else:
            Z, input_bias = torch.eye(V, d, dtype=dtype), None
        return PseudoInverseTying(
            Z, torch.eye(d, dtype=dtype), bias=bias, input_bias=input_bias, **options
        )
    raise ValueError(f"config.{CONFIG_KEY}['tie'] must be 'untied', 'tt' or 'pit', got {tie!r}")
