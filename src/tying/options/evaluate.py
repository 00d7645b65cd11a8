"""Options of `tying evaluate` (downstream tasks through lm-eval)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from tying.config import positional
from tying.errors import InvalidInputError
from tying.options.common import TASK_NAMES, Precision


@dataclass
class EvaluateOptions:
    """What `evaluate_model` evaluates, and how (also the flags of `tying evaluate`).

    Attributes:
        spec: the model: a run or checkpoint folder, smollm2, a .gguf file, a transformers
            folder or a Hugging Face Hub id.
        tasks: task names among gsm8k, svamp, mbpp, humaneval: comma-separated, several, or
            both (--tasks gsm8k,svamp mbpp).
        out: output folder of results.json (refused when not empty, unless --overwrite).
        adapter: a peft adapter folder applied on top of the model (checked against the base
            model it was trained on), or null.
        limit: evaluate a fixed seeded subset of this many items per task (>= 1); null: all.
        seed: seed of the subset.
        batch_size: requests per forward/generation batch.
        max_new_tokens: generation length limit for every task; null: each task's own
            (GSM8K/SVAMP/MBPP 256, HumanEval 1024, as lm-eval's tasks).
        num_fewshot: few-shot examples for GSM8K and SVAMP (lm-eval's num_fewshot); null: the
            tasks' own (5). MBPP's 3 fixed examples are part of its prompts, HumanEval has none.
        device: auto (cuda if present), cpu or cuda[:N].
        dtype: weights dtype (float32, bfloat16, ...).
        precision: auto (bf16 where the hardware has it, as every verb), bf16 (autocast
            around the float32 weights) or fp32; bf16 rounds the reference log-likelihoods (a
            sum of -704.27 nats came out as -704.0): choose fp32 to compare them to 0.01 nat.
        code_timeout_s: seconds each model-written program may run in the sandbox.
        reference_loglik: also score the references (ref_loglik_per_token); false skips it (the
            field is then null).
        generate: generate and score the answers (accuracy); false scores only the references
            (a likelihood-only evaluation: accuracy and ci95 are then null, and reference_loglik
            must stay on).
        overwrite: replace a non-empty output folder.
    """

    spec: str = positional()
    tasks: list[str] = dataclasses.field(default_factory=lambda: list(TASK_NAMES))
    out: str = "eval"
    adapter: str | None = None
    limit: int | None = None
    seed: int = 0
    batch_size: int = 8
    max_new_tokens: int | None = None
    num_fewshot: int | None = None
    device: str = "auto"
    dtype: str = "float32"
    precision: Precision = "auto"
    code_timeout_s: float = 10.0
    reference_loglik: bool = True
    generate: bool = True
    overwrite: bool = False

    def __post_init__(self) -> None:
        parse_tasks(self.tasks)  # an unknown task name is reported before torch loads


def parse_tasks(tasks: Sequence[str] | str) -> tuple[str, ...]:
    """Task names from a comma-separated string or a sequence of them ("gsm8k,svamp",
    ["gsm8k", "svamp"], ["gsm8k,svamp", "mbpp"]), in order, without repeats.

    Raises:
        ValueError: an unknown name, or none.
    """
    parts = [tasks] if isinstance(tasks, str) else list(tasks)
    names = [n.strip().lower() for part in parts for n in str(part).split(",") if n.strip()]
    if not names:
        raise InvalidInputError(f"no task given: choose among {', '.join(TASK_NAMES)}")
    unknown = [n for n in names if n not in TASK_NAMES]
    if unknown:
        raise InvalidInputError(
            f"unknown task {unknown[0]!r}: choose among {', '.join(TASK_NAMES)}"
        )
    return tuple(dict.fromkeys(names))
