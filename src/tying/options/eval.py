"""Options of `tying eval` (loss and perplexity on a text)."""

from __future__ import annotations

from dataclasses import dataclass

from tying.config import positional
from tying.options.common import Precision


@dataclass
class EvalOptions:
    """Options of `tying eval`.

    Attributes:
        spec: the model: a run or checkpoint folder, smollm2, a .gguf file, a model folder or a
            hub id.
        data: evaluation text (a file, folder, glob or hf:NAME); null = Gutenberg validation.
        max_tokens: cap on the evaluated target tokens (null = the whole text).
        seq_len: tokens per window (null = the run's seq_len, else 256).
        batch_size: windows per forward pass.
        tokenizer: override the model's tokenizer (a tokenizer spec).
        precision: auto, bf16 or fp32 (loss and log-sum-exp in fp32 whatever it is).
        device: auto (cuda if present), cpu or cuda[:N].
    """

    spec: str = positional()
    data: str | None = None
    max_tokens: int | None = None
    seq_len: int | None = None
    batch_size: int = 8
    tokenizer: str | None = None
    precision: Precision = "auto"
    device: str = "auto"
