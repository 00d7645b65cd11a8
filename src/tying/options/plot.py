"""Options of `tying plot`."""

from __future__ import annotations

from dataclasses import dataclass

from tying.config import positional
from tying.errors import InvalidInputError


@dataclass
class PlotOptions:
    """Options of `tying plot`.

    Attributes:
        runs: run folders (with metrics.jsonl).
        metric: a key of metrics.jsonl, e.g. loss, val_loss, grad_out_share.
        rolling: trailing rolling-mean window in logged rows (1 = off).
        max_step: plot only rows with step <= this (null = all).
        out: PNG to write (null = <first run>/plot-<metric>.png).
        ylim: y-axis range [LOW, HIGH] (null = automatic).
        json: file of the plotted series (steps, values, rolling mean per run); null = beside
            the PNG, with its name and .json (the CLI always uses that: its `--json` prints
            the file instead of the summary).
    """

    runs: list[str] = positional()
    metric: str = "loss"
    rolling: int = 1
    max_step: int | None = None
    out: str | None = None
    ylim: list[float] | None = None
    json: str | None = None

    def __post_init__(self) -> None:
        if self.rolling < 1:
            raise InvalidInputError(f"rolling must be >= 1, got {self.rolling}")
        if self.ylim is not None and (len(self.ylim) != 2 or not self.ylim[0] < self.ylim[1]):
            raise InvalidInputError(f"ylim needs two numbers LOW < HIGH, got {self.ylim}")
