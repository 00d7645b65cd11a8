"""Options of `tying side-effects`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tying.config import positional
from tying.options.common import Precision

#: Default texts.
DEFAULT_TEXTS = ("wikitext-2", "gutenberg-validation")


@dataclass
class SideEffectsOptions:
    """Options of `tying side-effects`.

    Attributes:
        base: the model before the update: a run or checkpoint folder, smollm2, a .gguf file,
            a model folder or a hub id.
        updated: the updated model (any SPEC); with --adapter, the base the adapter is applied
            to (usually the same SPEC as BASE).
        out: output folder of side_effects.json (refused when not empty, unless --overwrite).
        adapter: a LoRA adapter folder (tying finetune) applied to UPDATED, or null.
        texts: texts to compare on: wikitext-2 (test split), gutenberg-validation, or files
            (.txt, .jsonl, .parquet, optionally .gz/.xz).
        max_tokens: positions scored per text (whole windows of seq_len; 0 = the whole text).
        lens_tokens: positions per text for the logit-lens profiles (0 = no lens).
        seq_len: tokens per window.
        batch_size: windows per forward pass.
        vocab_chunk: vocabulary columns per block of logits (memory ~ positions × vocab_chunk).
        lens_chunk_tokens: positions per head evaluation of the logit lens (memory ~
            lens_chunk_tokens × V).
        tasks: also evaluate both models on these tasks (gsm8k, svamp, mbpp, humaneval;
            comma-separated or several) and compare them item by item; null = no tasks.
        limit: items per task (a fixed seeded subset, >= 1); null = all.
        seed: seed of the task subsets and of the bootstraps.
        eval_batch_size: requests per forward/generation batch of the task evaluation.
        max_new_tokens: generation length limit of the tasks (null = each task's own).
        num_fewshot: few-shot examples for GSM8K and SVAMP (null = 5).
        bootstrap_resamples: resamples of the paired bootstraps.
        precision: auto (bf16 where the hardware has it, as every verb), bf16 or fp32 for the
            forward passes (log-sum-exp and KL in fp32 always); choose fp32 so that the
            rounding of bf16 activations does not add to the small differences measured.
        device: auto (cuda if present), cpu or cuda[:N].
        overwrite: replace a non-empty output folder.
        progress: show progress bars.
    """

    base: str = positional()
    updated: str = positional()
    out: str = "side-effects"
    adapter: str | None = None
    texts: list[str] = dataclasses.field(default_factory=lambda: list(DEFAULT_TEXTS))
    max_tokens: int = 16384
    lens_tokens: int = 4096
    seq_len: int = 256
    batch_size: int = 4
    vocab_chunk: int = 8192
    lens_chunk_tokens: int = 256
    tasks: list[str] | None = None
    limit: int | None = None
    seed: int = 0
    eval_batch_size: int = 8
    max_new_tokens: int | None = None
    num_fewshot: int | None = None
    bootstrap_resamples: int = 10000
    precision: Precision = "auto"
    device: str = "auto"
    overwrite: bool = False
    progress: bool = True
