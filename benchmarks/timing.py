"""Shared helpers of the benchmark scripts: round-robin timing and JSON output.

Machines here are noisy: variants are timed alternately, one step of each per
round, after a warm-up round, and compared by their medians.
"""

from __future__ import annotations

import json
import platform
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


def cpu_model() -> str:
    """The CPU's model name (Linux), else the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def cpu_description() -> dict[str, object]:
    """The CPU's model name, its bf16-relevant flags and the project's verdict on fast bf16
    (`tying.devices.cpu_bf16_support`): what a CPU benchmark's JSON names its machine by."""
    from tying.devices import cpu_bf16_support, cpu_flags

    flags = cpu_flags() or set()
    fast, why = cpu_bf16_support()
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    return {
        "model": cpu_model(),
        "flags": [f for f in wanted if f in flags],
        "fast_bf16": fast,
        "fast_bf16_why": why,
    }
