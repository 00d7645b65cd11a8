"""Shared helpers of the benchmark scripts: round-robin timing and JSON output.

Machines here are noisy: variants are timed alternately, one step of each per
round, after a warm-up round, and compared by their medians.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def round_robin(
    steps: dict[str, Callable[[], Any]], reps: int, label: str = "", warmup: bool = True
) -> dict[str, list[float]]:
    """Seconds per call of each step, `reps` rounds after one warm-up round (none when `warmup`
    is False: the caller warmed up), printed as it goes."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    for round_index in range(0 if warmup else 1, reps + 1):
        for name, step in steps.items():
            t0 = time.perf_counter()
            step()
            if round_index > 0:
                times[name].append(time.perf_counter() - t0)
        if round_index > 0:
            print(
                f"  {label}round {round_index}: "
                + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()),
                flush=True,
            )
    return times


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in times.items()}


def write_json(result: dict[str, Any], out: str | Path) -> Path:
    """Write `result` as indented JSON (creating the folder) and say where."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    return path
