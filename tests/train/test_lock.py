"""The run folder's lock: one live process per folder, never stuck after a kill."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tying.cli import main
from tying.train.lock import LOCK_FILE, RunFolderInUseError, RunFolderLock, read_holder

#: A process that takes the lock of argv[1], says so, and sleeps until it is killed.
_HOLDER = (
    "import sys, time\n"
    "from tying.train.lock import RunFolderLock\n"
    "RunFolderLock(sys.argv[1]).acquire()\n"
    "print('held', flush=True)\n"
    "time.sleep(600)\n"
)


def _hold(folder) -> subprocess.Popen:
    """A separate process holding `folder`'s lock (returns once it holds it)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_lock_is_refused_naming_the_holder(tmp_path) -> None:
    folder = tmp_path / "run"
    with RunFolderLock(folder):
        holder = read_holder(folder)
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        with pytest.raises(RunFolderInUseError) as caught:
            RunFolderLock(folder).acquire()
        message = str(caught.value)
        assert f"process {os.getpid()} on {socket.gethostname()}" in message
        assert "\n" not in message and "choose another out" in message
    # released: the lock file is gone, and so is the folder this lock created (nothing in it)
    assert not folder.exists()
    (tmp_path / "kept").mkdir()
    with RunFolderLock(tmp_path / "kept"):
        (tmp_path / "kept" / "metrics.jsonl").write_text("")
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["metrics.jsonl"]


def test_the_lock_of_a_killed_holder_is_free(tmp_path) -> None:
    folder = tmp_path / "run"
    proc = _hold(folder)
    try:
        with pytest.raises(RunFolderInUseError, match=f"process {proc.pid} on "):
            RunFolderLock(folder).acquire()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert (folder / LOCK_FILE).exists()  # left behind by the kill, with the dead holder's pid
    assert read_holder(folder)["pid"] == proc.pid
    with RunFolderLock(folder):
        assert read_holder(folder)["pid"] == os.getpid()


def test_a_file_is_not_a_run_folder(tmp_path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        RunFolderLock(tmp_path / "file").acquire()


@pytest.mark.parametrize("verb", ["train", "finetune"])
def test_the_cli_refuses_a_folder_in_use_with_one_line(verb, tmp_path, capsys) -> None:
    """Exit status 2 and one line naming the holder, before anything is read or written."""
    folder = tmp_path / "run"
    proc = _hold(folder)
    try:
        if verb == "train":
            argv = ["train", f"out={folder}", "data=/nowhere.jsonl", "progress=false"]
        else:
            argv = ["finetune", "/nowhere", "--task", "/nowhere.jsonl", "--out", str(folder)]
        started = time.perf_counter()
        assert main(argv) == 2
        assert time.perf_counter() - started < 30
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"tying {verb}: error: {folder} is in use by process {proc.pid} on ")
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_FILE]
