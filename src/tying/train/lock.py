"""A run folder belongs to one run while it runs: an OS lock on `FOLDER/.lock`.

    with locked_run_folder(out, info):
        ...  # check the resume point, build, train, write checkpoints and metrics

`tying train` and `tying finetune` take the lock before they look at the folder (its
checkpoints, its metrics.jsonl) and hold it until they end. A second process aiming at the same
folder is refused at once (`RunFolderInUseError`, a user error: one line, exit status 2) with the
process id, host and command of the holder, read from the lock file.

The lock is `fcntl.flock` on the lock file: the kernel releases it when the holder's last file
descriptor closes, so a killed run (SIGKILL, OOM, a lost node) never leaves it stuck; the file
may stay behind with the dead holder's details, and the next run simply takes the lock and
rewrites them. A run that ends removes the file; a run that created the folder and wrote nothing
else into it (bad input found while building) removes the folder too.

Under torchrun only rank 0 takes the lock, for its whole process group: it tells the other ranks
whether it got it (one broadcast), so that every rank stops with the same message instead of
waiting for rank 0 in a collective. On a shared file system (several nodes) the lock is as good
as the file system's `flock` (NFS v4 and Lustre with `flock` mounts honour it).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tying.errors import ExistingFileError, NotAFolderError

#: The lock file inside a run folder.
LOCK_FILE = ".lock"


class RunFolderInUseError(ExistingFileError):
    """Another live process holds the run folder (a user error: exit status 2)."""

    exit_status = 2


def _holder_text(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "another process (it has not recorded its id yet)"
    text = f"process {holder.get('pid', '?')} on {holder.get('host', '?')}"
    details = [str(holder[k]) for k in ("started", "command") if holder.get(k)]
    return text + (f" ({', '.join(details)})" if details else "")


def read_holder(folder: str | Path) -> dict[str, Any] | None:
    """What the lock file of `folder` says about its (last) holder: pid, host, started,
    command; None when there is no readable record. It does not say whether that process is
    still alive: only the lock does (see `RunFolderLock`)."""
    try:
        data = json.loads((Path(folder) / LOCK_FILE).read_text() or "null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class RunFolderLock:
    """An exclusive, non-blocking `flock` on `folder/.lock` (the folder is created if needed).

    Args:
        folder: the run folder, exactly as the run writes it (no `~` expansion here).
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self._fd: int | None = None
        self._created = False

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> RunFolderLock:
        """Take the lock and record this process in the lock file.

        Raises:
            RunFolderInUseError: another live process holds it (named in the message).
            NotADirectoryError: `folder` is a file.
        """
        import fcntl

        if self.held:
            return self
        if self.folder.exists() and not self.folder.is_dir():
            raise NotAFolderError(f"{self.folder} is a file, not a run folder: choose another out")
        while True:
            if not self.folder.exists():
                self.folder.mkdir(parents=True, exist_ok=True)
                self._created = True
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:  # the folder was removed under us by a finishing holder
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise RunFolderInUseError(
                    f"{self.folder} is in use by {_holder_text(read_holder(self.folder))}: wait "
                    "for that run to end (or stop it), or choose another out"
                ) from None
            if self._same_file(fd):
                break
            os.close(fd)  # a holder removed the file between our open and our lock: again
        self._fd = fd
        self._record()
        return self

    def _same_file(self, fd: int) -> bool:
        """Whether `fd` is still the file at `self.path` (not one unlinked by its last holder)."""
        try:
            here = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)

    def _record(self) -> None:
        program = Path(sys.argv[0])  # `python -m tying`: .../tying/__main__.py
        name = program.parent.name if program.name == "__main__.py" else program.name
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join([name, *sys.argv[1:]])[:300],
        }
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, (json.dumps(holder) + "\n").encode(), 0)
        os.fsync(self._fd)

    def release(self) -> None:
        """Remove the lock file (still holding the lock), then let the lock go; remove the
        folder too when this lock created it and nothing else was written into it."""
        if self._fd is None:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            if self._created:
                with contextlib.suppress(OSError):  # not empty: the run wrote into it
                    self.folder.rmdir()
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunFolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def locked_run_folder(folder: str | Path, info: Any = None) -> Iterator[RunFolderLock | None]:
    """Hold the lock of `folder` for a process group (see the module docstring).

    Args:
        folder: the run folder.
        info: the process's `tying.train.distributed.DistInfo` (None: one process). Rank 0 takes
            the lock; with several processes it broadcasts the outcome, and every rank raises
            the same `RunFolderInUseError` when the folder is in use. Yields the lock on rank 0,
            None on the other ranks.
    """
    enabled = info is not None and info.enabled
    lock = RunFolderLock(folder) if info is None or info.is_main else None
    failure: BaseException | None = None
    if lock is not None:
        try:
            lock.acquire()
        except (RunFolderInUseError, NotADirectoryError) as e:
            failure = e
    if enabled:
        import torch.distributed as dist

        message = [None if failure is None else (type(failure).__name__, str(failure))]
        dist.broadcast_object_list(message, src=0)
        if message[0] is not None and failure is None:
            kind, text = message[0]
            failure = (
                NotADirectoryError(text)
                if kind == "NotADirectoryError"
                else RunFolderInUseError(text)
            )
    if failure is not None:
        raise failure
    try:
        yield lock
    finally:
        if lock is not None:
            lock.release()
