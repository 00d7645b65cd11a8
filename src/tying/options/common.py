"""Field types shared by several verbs' options."""

from __future__ import annotations

from typing import Literal

#: The precision setting of every verb (`precision: Precision = "auto"`): the same values as
#: `tying.devices.Precision` (tested), which resolves them with torch.
Precision = Literal["auto", "bf16", "fp32"]

#: The downstream tasks `tying evaluate` knows, in order: the names of
#: `tying.evaluation.tasks.TASKS` (tested equal).
TASK_NAMES: tuple[str, ...] = ("gsm8k", "svamp", "mbpp", "humaneval")
