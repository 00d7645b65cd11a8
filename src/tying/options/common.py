"""Field types shared by several verbs' options."""

from __future__ import annotations

from typing import Any, Literal

#: The precision setting of every verb (`precision: Precision = "auto"`): the same values as
#: `tying.devices.Precision` (tested), which resolves them with torch.
Precision = Literal["auto", "bf16", "fp32"]

#: The downstream tasks `tying evaluate` knows, in order: the names of
#: `tying.evaluation.tasks.TASKS` (tested equal).
TASK_NAMES: tuple[str, ...] = ("gsm8k", "svamp", "mbpp", "humaneval")


def contradictions(options: Any) -> list[str]:
    """Settings of a run's options that are valid but cannot all take effect with its step
    schedule (one sentence each), for the CLI to warn about: a warm-up or an evaluation
    interval longer than the run. The one check of every verb with a step schedule
    (`TrainConfig`, `FinetuneOptions`: any object with `max_steps` and some of `warmup_steps`,
    `lr`, `eval_every`); no `max_steps` (null: the length
    follows the data) -> nothing to check."""
    max_steps = getattr(options, "max_steps", None)
    if max_steps is None or max_steps < 1:
        return []
    out = []
    warmup = getattr(options, "warmup_steps", 0) or 0
    if warmup > max_steps:
        lr = getattr(options, "lr", None)
        reach = (
            f"lr={lr:g} (it ends at {lr * max_steps / warmup:.3g})"
            if isinstance(lr, (int, float))
            else "its peak"
        )
        out.append(
            f"warmup_steps={warmup} > max_steps={max_steps}: the learning rate never reaches "
            + reach
        )
    eval_every = getattr(options, "eval_every", 0) or 0
    if eval_every > max_steps:
        out.append(
            f"eval_every={eval_every} > max_steps={max_steps}: validation runs only at the end"
        )
    # A checkpoint interval longer than the run is no contradiction: the final step is always
    # checkpointed, so nothing the user asked for is lost.
    return out
