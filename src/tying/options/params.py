"""Options of `tying params`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tying.config import positional, tie_field


@dataclass
class ParamsOptions:
    """Options of `tying params`.

    Attributes:
        preset: decoder preset: tiny, mini, small, medium, large or xl.
        vocab: vocabulary size V (tokens; 50257 = GPT-2).
        tie: token interface: untied, tt or pit.
        norm: rms or layer.
    """

    preset: str = positional()
    vocab: int = 50257
    tie: str = tie_field()
    norm: Literal["rms", "layer"] = "rms"
