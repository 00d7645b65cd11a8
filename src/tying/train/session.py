"""A run session: the one owner of a run folder, for `tying train` and `tying finetune` alike.

    folder = RunFolder(out, resume=options.resume, resume_option="--resume",
                       check_saved=same_settings)
    with RunSession(folder) as session:                # lock, used folder, resume point
        result = session.run(lambda resume_from: describe(resume_from))
        ...                                            # the verb's final files, still locked

A verb only describes its run (`Prepared`: the loop's `Run` and `LoopSettings`, what to do after
a restore, the rows of a fresh start); the session does the rest, the same way for both:

lock        -> `tying.train.lock.locked_run_folder` (rank 0 for a process group), held to the end
used folder -> ONE policy: a folder holding anything but its lock file belongs to a run; without
               resume it is refused with one line (`ConfigError`, nothing is overwritten)
resume      -> the newest checkpoint whose every file loads (`tying.train.checkpoint`); newer
               damaged ones are skipped with a one-line warning naming the file; the settings
               it was saved with are checked by the verb (`RunFolder.check_saved`); resume with
               nothing to resume says so in one line and starts at step 1
restore     -> `tying.train.loop.restore` (optimizer, weights, random state, data position)
metrics     -> metrics.jsonl and TensorBoard: rows after the resume step dropped, TensorBoard's
               later points purged (`purge_step`); a fresh start removes earlier event files
loop        -> `tying.train.loop.run_loop`
interrupts  -> SIGINT and SIGTERM, while the loop runs, let the current step finish; the loop
               then writes a checkpoint of that step (atomic, like the others) and the session
               raises `RunInterrupted`: one line naming the checkpoint, exit status 130 (SIGINT)
               or 143 (SIGTERM) through the CLI. Before the loop (building, tokenizing), after
               it, or at a second signal, the run stops at once with the same exit status (the
               last checkpoint stays the resume point). Under torchrun every rank stops at the
               same step (the flag is reduced in each step's one host sync). Handlers are installed only
               in the main thread, and the previous ones are put back when the session ends.

A full disk while a checkpoint is written stops the run with one line
(`tying.train.checkpoint.CheckpointWriteError`, exit status 1), the previous checkpoint intact.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from tying.config import ConfigError
from tying.train import checkpoint as ckpt
from tying.train.distributed import DistInfo
from tying.train.lock import LOCK_FILE, locked_run_folder
from tying.train.loop import (
    LoopResult,
    LoopSettings,
    LoopState,
    Run,
    metrics_logger,
    restore,
    run_loop,
)
from tying.train.metrics import MetricsLogger

logger = logging.getLogger(__name__)

#: The signals that stop a run with a checkpoint.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM (a KeyboardInterrupt: nothing catches it as an error).

    Attributes:
        signum: the signal.
        exit_status: 128 + signum: 130 for SIGINT, 143 for SIGTERM.
        checkpoint: the checkpoint written at the interrupt (None: stopped at once; the last
            checkpoint, if any, is the resume point).
    """

    def __init__(self, message: str, signum: int, checkpoint: Path | None = None) -> None:
        super().__init__(message)
        self.signum = int(signum)
        self.exit_status = 128 + self.signum
        self.checkpoint = checkpoint


def signal_name(signum: int) -> str:
    """`SIGINT` for 2."""
    return signal.Signals(signum).name


@dataclass
class RunFolder:
    """A verb's run folder, as the session needs it.

    Attributes:
        path: the folder (as the run writes it).
        resume: continue the run in `path`.
        resume_option: how a user asks for resume ("resume=true", "--resume").
        check_saved: refuses (ConfigError) a checkpoint saved with settings this run may not
            change; called with its trainer.json and its folder.
        other_folder: how the messages name another folder ("another out").
    """

    path: Path
    resume: bool
    resume_option: str
    check_saved: Callable[[dict[str, Any], Path], None]
    other_folder: str = "another out"


@dataclass
class Prepared:
    """A verb's run, described for the session (built once the resume point is known).

    Attributes:
        run: the loop's run.
        settings: the loop's settings.
        after_restore: called after the checkpoint (if any) is loaded, before the loop (e.g. the
            PIT retraction hook, the gradient-path tracker).
        fresh_rows: writes the first metrics rows of a run that starts at step 0 (rank 0).
        announce: a line logged just before the loop (rank 0).
    """

    run: Run
    settings: LoopSettings
    after_restore: Callable[[], None] | None = None
    fresh_rows: Callable[[MetricsLogger], None] | None = None
    announce: str | None = None


def used_folder_entries(path: Path) -> list[str]:
    """The names in `path` other than its lock file (sorted; [] when it is missing or empty)."""
    if not path.is_dir():
        return []
    return sorted(p.name for p in path.iterdir() if p.name != LOCK_FILE)


def resume_point(folder: RunFolder) -> Path | None:
    """Where the run in `folder` starts: the used-folder policy and the resume point.

    Without resume, a folder holding anything but its lock file is refused; with resume, the
    newest checkpoint whose every file loads (newer damaged ones skipped with a warning),
    after `folder.check_saved`, or None (one line: nothing to resume, start at step 1).

    Raises:
        ConfigError: a used folder without resume; checkpoints but none intact; a checkpoint
            saved with settings this run may not change.
    """
    path = folder.path
    if not folder.resume:
        used = used_folder_entries(path)
        if used:
            shown = ", ".join(used[:3]) + (", ..." if len(used) > 3 else "")
            raise ConfigError(
                f"{path} already holds a run ({shown}): pass {folder.resume_option} to continue "
                f"it, or choose {folder.other_folder} (nothing was overwritten)"
            )
        return None
    found = ckpt.checkpoint_to_resume(
        path, restart_hint=f"start again without {folder.resume_option} in {folder.other_folder}"
    )
    if found is None:
        logger.warning("resume: %s holds no checkpoint to resume from; starting at step 1", path)
        return None
    folder.check_saved(ckpt.read_trainer_state(found), found)
    return found


class _Interrupts:
    """SIGINT/SIGTERM handlers: stop at once, or (while `deferring`) note the first signal."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.deferring = False
        self.done_step: Callable[[], int] = lambda: 0
        self.last_checkpoint: Callable[[], Path | None] = lambda: None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers belong to the main thread; elsewhere Python's stay
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal_name(signum)
        if self.deferring and self.received is None:
            self.received = signum
            logger.info(
                "%s: finishing step %d, then writing a checkpoint (a second signal stops at once)",
                name,
                self.done_step() + 1,
            )
            return
        last = self.last_checkpoint()
        where = f"the last checkpoint is {last}" if last is not None else "no checkpoint was kept"
        again = " again" if self.received is not None else ""
        raise RunInterrupted(f"interrupted by {name}{again}: stopped at once; {where}", signum)


class RunSession:
    """The owner of a run folder for one run (see the module docstring).

    Args:
        folder: the verb's folder and resume policy.
        info: this process's place in the process group (None: one process).
    """

    def __init__(self, folder: RunFolder, info: DistInfo | None = None) -> None:
        self.folder = folder
        self.info = info
        self.resume_from: Path | None = None
        self._interrupts = _Interrupts()
        self._stack = ExitStack()
        self._step = 0
        self._interrupts.done_step = lambda: self._step
        self._interrupts.last_checkpoint = self._last_checkpoint

    @property
    def is_main(self) -> bool:
        return self.info is None or self.info.is_main

    def __enter__(self) -> RunSession:
        with ExitStack() as stack:
            stack.enter_context(locked_run_folder(self.folder.path, self.info))
            self._interrupts.install()
            stack.callback(self._interrupts.uninstall)
            self.resume_from = resume_point(self.folder)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _last_checkpoint(self) -> Path | None:
        return ckpt.latest_checkpoint(self.folder.path)  # by its pointer: nothing is loaded

    def run(self, prepare: Callable[[Path | None], Prepared]) -> LoopResult:
        """Build the run (`prepare(resume_from)`), restore it, open its metrics, run the loop.

        Raises:
            RunInterrupted: SIGINT or SIGTERM (a checkpoint of the last step was written).
            DivergenceError, CheckpointWriteError: from the loop (the last good checkpoint
                is kept).
        """
        prepared = prepare(self.resume_from)
        run, settings = prepared.run, prepared.settings
        start = LoopState()
        if self.resume_from is not None:
            start = restore(run, self.resume_from)
            if self.is_main:
                logger.info("resuming from step %d (%s)", start.step, self.resume_from)
        if prepared.after_restore is not None:
            prepared.after_restore()
        resumed = start if self.resume_from is not None else None
        metrics = metrics_logger(run, settings, resumed) if self.is_main else None
        if metrics is not None and resumed is None and prepared.fresh_rows is not None:
            prepared.fresh_rows(metrics)
        if prepared.announce and self.is_main:
            logger.info("%s", prepared.announce)
        self._step = start.step
        with self._deferring():
            result = run_loop(run, settings, start, metrics, self._stop_requested)
        if result.stopped:  # another rank's signal: the same stop here, as SIGTERM
            signum = self._interrupts.received or signal.SIGTERM
            where = (
                f"wrote its checkpoint {result.checkpoint}"
                if result.checkpoint is not None
                else "rank 0 wrote its checkpoint"
            )
            raise RunInterrupted(
                f"interrupted by {signal_name(signum)}: stopped after step {result.steps} and "
                f"{where}; continue with {self.folder.resume_option}",
                signum,
                result.checkpoint,
            )
        return result

    def _stop_requested(self) -> bool:
        """This process's stop request, read once per step by the loop (which reduces it over
        the process group); it also counts the steps for the signal's notice."""
        self._step += 1
        return self._interrupts.received is not None

    @contextmanager
    def _deferring(self) -> Iterator[None]:
        """While the loop runs, a first signal is noted (the loop checkpoints and stops)."""
        self._interrupts.deferring = True
        try:
            yield
        finally:
            self._interrupts.deferring = False
