"""metrics.jsonl, the source of truth of a run; TensorBoard mirrors it."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tying.errors import MissingFileError

METRICS_FILE = "metrics.jsonl"
#: The folder of a run's TensorBoard event files.
TENSORBOARD_DIR = "tensorboard"

#: Units of the metrics.jsonl keys (for axis labels and tables); keys not listed are unitless.
METRIC_UNITS: dict[str, str] = {
    "loss": "nats/token",
    "val_loss": "nats/token",
    "ce": "nats/token",
    "kl": "nats/token",
    "tokens": "tokens",
    "tokens_per_s": "tokens/s",
    "elapsed_s": "s",
    "grad_out_share": "fraction",
    "rows_touched_in": "rows",
}


def metric_label(key: str) -> str:
    """`key` with its unit, e.g. "loss (nats/token)"; the bare key when it has none."""
    unit = METRIC_UNITS.get(key)
    if unit is None and key.endswith("_share"):
        unit = "fraction"
    return f"{key} ({unit})" if unit else key


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All rows of a run's metrics.jsonl (a torn last line from a kill is skipped)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise MissingFileError(f"{path} does not exist: is {run_dir} a training run folder?")
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def metric_series(
    rows: Sequence[dict[str, Any]], metric: str, max_step: int | None = None
) -> tuple[list[int], list[float]]:
    """(steps, values) of the rows holding `metric` as a finite number (bools excluded)."""
    steps, values = [], []
    for row in rows:
        value = row.get(metric)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(value) or "step" not in row:
            continue
        if max_step is not None and row["step"] > max_step:
            continue
        steps.append(int(row["step"]))
        values.append(float(value))
    return steps, values


def rolling_mean(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean: out[i] = mean(values[max(0, i − window + 1) : i + 1]).

    Raises:
        ValueError: window < 1.
    """
    if window < 1:
        raise ValueError(f"the rolling window must be >= 1, got {window}")
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


class MetricsLogger:
    """Appends one JSON object per line to `run_dir/metrics.jsonl` (and TensorBoard scalars).

    Args:
        run_dir: the run folder.
        resume_step: when resuming, rows of steps after this one (written by the
            killed run after its last checkpoint) are dropped, so that the file
            again describes one run; TensorBoard is told the same (`purge_step`: it hides
            the earlier event files' points after `resume_step`). None: a fresh start,
            which empties metrics.jsonl and removes earlier event files.
        tensorboard: also write TensorBoard event files under run_dir/tensorboard.
    """

    def __init__(
        self, run_dir: str | Path, resume_step: int | None = None, tensorboard: bool = True
    ) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            kept = [r for r in read_metrics(run_dir) if r.get("step", 0) <= resume_step]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        elif resume_step is None:
            self.path.write_text("")
            shutil.rmtree(Path(run_dir) / TENSORBOARD_DIR, ignore_errors=True)
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 (closed by close())
        self._writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if resume_step is None else resume_step + 1
            self._writer = SummaryWriter(str(Path(run_dir) / TENSORBOARD_DIR), purge_step=purge)

    def log(self, row: dict[str, Any]) -> None:
        """Write one row (must contain `step`); numbers also go to TensorBoard."""
        clean = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in row.items()
        }
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()
        if self._writer is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                    self._writer.add_scalar(key, value, row["step"])

    def close(self) -> None:
        self._file.close()
        if self._writer is not None:
            self._writer.close()
