"""Timed, logged stages of a probe: `timings_s` in probe.json and progress lines on the
`tying.probe.stages` logger (INFO; the CLI shows them on stderr, `-q` hides them)."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Log = Callable[[str], None]

log = logging.getLogger(__name__)


def stage_log(message: str) -> None:
    """The stages' default log: an INFO record on this module's logger."""
    log.info("%s", message)


def stderr_log(prefix: str = "tying probe") -> Log:
    """Deprecated (removed in tying 0.3): the probe logs through `logging`; this returns
    `stage_log` (the CLI prefixes the lines itself, so `prefix` is ignored)."""
    warnings.warn(
        "tying.probe.stderr_log is deprecated: the probe logs through logging (logger "
        "tying.probe.stages); it will be removed in tying 0.3",
        DeprecationWarning,
        stacklevel=2,
    )
    return stage_log


def quiet_log(message: str) -> None:
    """A log that drops messages."""


class Stages:
    """Wall-clock seconds of named stages.

    with stages("consistency"):
        ...
    stages.timings  # {"consistency": 3.2}

    A stage entered twice adds up. Each stage logs its start and its time.
    """

    def __init__(self, log: Log = stage_log) -> None:
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
