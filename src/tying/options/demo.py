"""Options of `tying demo`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tying.options.common import Precision

#: Token budget per run (`budget: auto`) on a GPU, and on a CPU.
DEMO_TOKENS = 24_576
DEMO_TOKENS_CPU = 12_288
#: Items of the update step's evaluation (`update_limit: auto`) on a GPU, and on a CPU.
DEMO_UPDATE_LIMIT = 2
DEMO_UPDATE_LIMIT_CPU = 1


@dataclass
class DemoOptions:
    """Options of `tying demo`.

    Attributes:
        model: the teacher (smollm2, a .gguf, a transformers folder or a hub id).
        data: training text (null = a few Gutenberg training books).
        val_data: validation and lens text (null = Gutenberg validation).
        budget: training tokens per run; auto = 24,576 on a GPU, 12,288 on a CPU (with or
            without fast bf16), so that the demo stays within 15 minutes on 2 cores.
        steps: optimizer steps (overrides `budget`; null = from the budget).
        out: output folder (report.html, report.md, report.json, runs/).
        seq_len: tokens per window.
        batch_tokens: tokens per optimizer step.
        lens_tokens: positions of the logit lens.
        eval_tokens: validation tokens per run.
        tokenizer: override the teacher's tokenizer (a tokenizer spec).
        precision: auto, bf16 or fp32 for training, the update and its evaluation.
        update_task: the update step's task: a LoRA adapter of the TT and the PIT run (mbpp,
            gsm8k or a .jsonl file of {"prompt", "completion"}).
        update_steps: LoRA steps of each update (0 = no update step).
        update_limit: seeded items of `update_task` on which both runs are evaluated before and
            after their update; auto = 2 on a GPU, 1 on a CPU (as `budget`).
        side_effect_tokens: positions of WikiText-2 (test) on which each update's side effects
            are measured (KL, loss change, top-1 agreement; the lens profile on one window).
        progress: show progress bars.
    """

    model: str = "smollm2"
    data: str | None = None
    val_data: str | None = None
    budget: int | Literal["auto"] = "auto"
    steps: int | None = None
    out: str = "runs/demo"
    seq_len: int = 256
    batch_tokens: int = 2048
    lens_tokens: int = 1024
    eval_tokens: int = 4096
    tokenizer: str | None = None
    precision: Precision = "auto"
    update_task: str = "mbpp"
    update_steps: int = 4
    update_limit: int | Literal["auto"] = "auto"
    side_effect_tokens: int = 1024
    progress: bool = True
