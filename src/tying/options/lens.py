"""Options of `tying lens` and `tying trace`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tying.config import positional
from tying.errors import InvalidInputError
from tying.options.common import Precision


@dataclass
class LensOptions:
    """Options of `tying lens`.

    Attributes:
        specs: models: run or checkpoint folders, smollm2, .gguf files, model folders, hub ids.
        out: output folder (lens.json, lens.png, tuned/).
        kind: logit, tuned or both.
        data: evaluation text (null = Gutenberg validation).
        max_tokens: evaluated positions per model (0 = the whole text).
        seq_len: tokens per window.
        batch_size: windows per forward pass.
        chunk_tokens: positions per head evaluation (memory ~ chunk_tokens × V floats).
        precision: auto, bf16 or fp32 for the head products (bf16: within 1e-3 bits/token of
            fp32); forward passes, log-sum-exp and KL always in float32.
        device: auto (cuda if present), cpu or cuda[:N].
        tokenizer: override the models' tokenizer (a tokenizer spec).
        train_steps: tuned lens: optimizer steps.
        train_tokens_per_step: tuned lens: tokens per step (a multiple of seq_len).
        train_data: tuned lens: training text (null = `data`, windows after the evaluation
            windows).
        optimizer: tuned lens: sgd (Nesterov momentum, the tuned-lens recipe) or adam.
        lr: tuned lens: learning rate (null = 0.1 for sgd, 1e-3 for adam).
        seed: tuned lens: order of the training windows.
        tuned_from: folder holding <name>/ lenses saved by an earlier run: load them, train none.
        log_y: symmetric-log y axis in lens.png.
        progress: show progress bars.
    """

    specs: list[str] = positional()
    out: str = "lens"
    kind: Literal["logit", "tuned", "both"] = "logit"
    data: str | None = None
    max_tokens: int = 16384
    seq_len: int = 256
    batch_size: int = 8
    chunk_tokens: int = 1024
    precision: Precision = "auto"
    device: str = "auto"
    tokenizer: str | None = None
    train_steps: int = 250
    train_tokens_per_step: int = 4096
    train_data: str | None = None
    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: float | None = None
    seed: int = 0
    tuned_from: str | None = None
    log_y: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        if not self.specs:
            raise InvalidInputError("give at least one model SPEC")
        if self.seq_len < 1 or self.batch_size < 1 or self.chunk_tokens < 1:
            raise InvalidInputError("seq_len, batch_size and chunk_tokens must be >= 1")
        if self.max_tokens < 0:
            raise InvalidInputError(
                f"max_tokens must be >= 0 (0 = the whole text), got {self.max_tokens}"
            )
        training = self.kind != "logit" and self.tuned_from is None
        if training and (
            self.train_tokens_per_step < self.seq_len or self.train_tokens_per_step % self.seq_len
        ):
            raise InvalidInputError(
                f"train_tokens_per_step {self.train_tokens_per_step} must be a positive "
                f"multiple of seq_len {self.seq_len}"
            )


@dataclass
class TraceOptions:
    """Options of `tying trace`.

    Attributes:
        spec: the model: a run or checkpoint folder, smollm2, a .gguf file, a model folder or a
            hub id.
        prompt: the text; its last token (or the one at `position`) is traced.
        top_k: anchor tokens per side and entry.
        position: token position to trace (-1 = the last).
        out: folder for trace.json and trace.png (null = trace-<model name>).
        tokenizer: override the model's tokenizer (a tokenizer spec).
        precision: auto, bf16 or fp32.
        device: auto (cuda if present), cpu or cuda[:N].
    """

    spec: str = positional()
    prompt: str
    top_k: int = 5
    position: int = -1
    out: str | None = None
    tokenizer: str | None = None
    precision: Precision = "auto"
    device: str = "auto"
