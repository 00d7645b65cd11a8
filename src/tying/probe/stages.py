"""Timed, logged stages of a probe: `timings_s` in probe.json and progress lines on stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Log = Callable[[str], None]


def stderr_log(prefix: str = "tying probe") -> Log:
    """A log that prints `prefix: message` to stderr (flushed: the stages can take minutes)."""

    def log(message: str) -> None:
        print(f"{prefix}: {message}", file=sys.stderr, flush=True)

    return log


def quiet_log(message: str) -> None:
    """A log that drops messages."""


class Stages:
    """Wall-clock seconds of named stages.

    with stages("consistency"):
        ...
    stages.timings  # {"consistency": 3.2}

    A stage entered twice adds up. Each stage logs its start and its time.
    """

    def __init__(self, log: Log = quiet_log) -> None:
        self.log = log
        self.timings: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str, detail: str = "") -> Iterator[None]:
        self.log(f"{name}{f' ({detail})' if detail else ''} ...")
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.timings[name] = round(self.timings.get(name, 0.0) + seconds, 3)
            self.log(f"{name}: {seconds:.1f} s")
