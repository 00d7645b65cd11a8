"""Build a token interface by name: the one place a `tie` string becomes a class."""

from __future__ import annotations

from typing import Any

import torch

from tying.interface.base import TokenInterface
from tying.interface.pit import PseudoInverseTying
from tying.interface.transpose import TransposeTying
from tying.interface.untied import Untied

TIES = ("untied", "tt", "pit")


def check_tie(tie: str) -> str:
    """Return `tie` if it names an interface, else raise ValueError listing the choices."""
    if tie not in TIES:
        raise ValueError(f"tie must be one of {TIES}, got {tie!r}")
    return tie


def build_interface(
    tie: str,
    vocab_size: int,
    d_model: int,
    *,
    generator: torch.Generator | None = None,
    init_std: float = 0.02,
    input_grad_scale: float = 1.0,
    **pit_options: Any,
) -> TokenInterface:
    """A freshly initialised interface for training from scratch.

    Args:
        tie: "untied", "tt" or "pit".
        vocab_size: V.
        d_model: d.
        generator: random source (deterministic construction).
        init_std: standard deviation of the Gaussian init of E (and U) for untied/TT.
        input_grad_scale: TT only: scale of the input-side gradient.
        pit_options: PIT only: keyword arguments of `PseudoInverseTying`
            (trainable_z, diag_activation, diag_clamp, ...).
    """
    check_tie(tie)
    if tie != "pit" and pit_options:
        raise ValueError(f"options {sorted(pit_options)} apply to tie='pit' only, got tie={tie!r}")
    if tie != "tt" and input_grad_scale != 1.0:
        raise ValueError(f"input_grad_scale applies to tie='tt' only, got tie={tie!r}")
    if tie == "untied":
        return Untied.scratch(vocab_size, d_model, std=init_std, generator=generator)
    if tie == "tt":
        return TransposeTying.scratch(
            vocab_size,
            d_model,
            std=init_std,
            generator=generator,
            input_grad_scale=input_grad_scale,
        )
    return PseudoInverseTying.scratch(vocab_size, d_model, generator=generator, **pit_options)
