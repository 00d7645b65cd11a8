"""Options of `tying finetune` (a LoRA update)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tying.config import positional
from tying.options.common import Precision


@dataclass
class FinetuneOptions:
    """Options of `tying finetune`.

    Attributes:
        spec: the base model: a run or checkpoint folder, smollm2, a .gguf file, a model folder
            or a hub id.
        task: mbpp, gsm8k (their training splits) or a .jsonl file of {"prompt", "completion"}
            records.
        out: output folder: the adapter (adapter_model.safetensors, adapter_config.json,
            tying_adapter.json), metrics.jsonl, finetune.json, checkpoints/.
        max_steps: optimizer steps (null = `epochs` passes over the training examples; 0 =
            save the untrained adapter, B = 0: the base model's outputs exactly).
        epochs: passes over the examples when max_steps is null.
        batch_size: examples per optimizer step.
        max_seq_len: tokens per example (prompt + completion); longer ones lose the end of
            their completion.
        lr: peak AdamW learning rate.
        warmup_steps: steps of linear warm-up.
        min_lr_ratio: final learning rate of the cosine decay, as a fraction of lr.
        weight_decay: AdamW weight decay of the trained tensors.
        beta1: AdamW first-moment decay.
        beta2: AdamW second-moment decay.
        grad_clip: maximum global gradient norm (0 = no clipping).
        rank: LoRA rank r.
        alpha: LoRA alpha; the update is scaled by alpha / r.
        dropout: LoRA dropout probability.
        target_modules: leaf names of the linear layers LoRA adapts (null = every linear layer
            inside the decoder blocks: the attention and MLP projections).
        train_interface: also train the token interface (untied: E and W_out; tt: the shared
            matrix; pit: the Cholesky factor L only, Z stays orthonormal).
        train_tokens: which token rows train (`tying.update.token_rows`): none, new (the rows
            added by `tying add-tokens`, old rows fixed; PIT: new rows of Z on the manifold and
            L) or all (every row; PIT: Z with its retraction, and L).
        append_eos: end every completion with the tokenizer's end-of-text token.
        seed: seed of the LoRA initialisation, the dropout and the example order.
        checkpoint_every: steps between checkpoints (0 = only at the end).
        keep_last: checkpoints kept (older ones are deleted).
        resume: continue the run in `out` from its newest intact checkpoint.
        precision: auto, bf16 (autocast) or fp32; losses and log-sum-exp in fp32 always.
        device: auto (cuda if present), cpu or cuda[:N].
        tensorboard: also write TensorBoard event files.
        progress: show a progress bar.
    """

    spec: str = positional()
    task: str = "mbpp"
    out: str = "finetune"
    max_steps: int | None = None
    epochs: int = 1
    batch_size: int = 8
    max_seq_len: int = 512
    lr: float = 2e-4
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.05
    target_modules: list[str] | None = None
    train_interface: bool = False
    train_tokens: Literal["none", "new", "all"] = "none"
    append_eos: bool = True
    seed: int = 0
    checkpoint_every: int = 50
    keep_last: int = 2
    resume: bool = False
    precision: Precision = "auto"
    device: str = "auto"
    tensorboard: bool = False
    progress: bool = True
