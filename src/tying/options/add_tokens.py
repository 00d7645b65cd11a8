"""Options of `tying add-tokens` (grow a model's vocabulary by new token strings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tying.config import positional

#: How the new rows start: the mean of all old rows, or of the rows of the string's pieces.
INITS = ("mean", "subwords")


@dataclass
class AddTokensOptions:
    """Options of `tying add-tokens`.

    Attributes:
        spec: the model: a run or checkpoint folder of our decoder, a converted folder,
            smollm2, a transformers folder or a hub id (anything `tying.load` loads).
        tokens: a UTF-8 text file, one new token string a line (the line without its line
            break; leading spaces count, empty lines are skipped).
        out: output folder (must not exist or be empty, unless overwrite).
        init: mean (the mean of all old rows) or subwords (the mean of the rows of the pieces
            the old tokenizer splits the string into).
        pit_keep: PIT only: the old side kept exactly: input (E, the default), output (W_out)
            or naive (polar re-orthonormalisation of [Z; z_new] with T kept: both move).
        check_text: a text file to measure the change on old text (KL and loss, nats/token);
            empty: no check.
        check_tokens: positions scored by the check.
        seq_len: window length of the check.
        overwrite: replace a non-empty `out`.
    """

    spec: str = positional()
    tokens: str
    out: str = "added"
    init: Literal["mean", "subwords"] = "mean"
    pit_keep: Literal["input", "output", "naive"] = "input"
    check_text: str = ""
    check_tokens: int = 4096
    seq_len: int = 256
    overwrite: bool = False
