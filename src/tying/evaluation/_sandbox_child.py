"""The child side of `tying.evaluation.sandbox`: runs in the fresh interpreter around the program.

The parent does not import this module: it passes its text to ``python -I -B -c`` with one
argument, a JSON object of settings, and writes the program's source to the child's stdin. It
therefore imports only the standard library. In order, it:

1. forbids gaining privileges (``PR_SET_NO_NEW_PRIVS``: set-user-id programs and file
   capabilities no longer elevate) and, when started as root, becomes the sandbox's own user and
   group: it first makes the working directory theirs, then ``setgroups([])``, ``setresgid``,
   ``setresuid``, which ends every capability, except CAP_DAC_READ_SEARCH (read any file) when
   the parent asks for it because the Python installation is not readable by other users (e.g.
   a pyenv under /root);
2. sets the resource limits (soft = hard, so the program cannot raise them again):
   RLIMIT_AS, RLIMIT_NPROC, RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE = 0;
3. reads the program from stdin (then points stdin at /dev/null) and compiles it;
4. installs the reliability guard (human-eval's ``reliability_guard`` list, plus refusals of
   sockets and of writes outside the working directory);
5. runs the program as ``__main__``.

Exit status: 0 when the program ran to its end; 1 when it raised, did not compile, or raised
SystemExit (``sys.exit()`` counts as a failure, as in human-eval, so a program cannot skip its
tests by exiting early with status 0); 2 when the setup itself failed.
"""

from __future__ import annotations

import builtins
import faulthandler
import json
import linecache
import os
import resource
import sys
import traceback

_PROGRAM_NAME = "<program>"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PR_SET_KEEPCAPS = 8
_PR_SET_NO_NEW_PRIVS = 38
_CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _prctl(option: int, value: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def _drop_privileges(uid: int, gid: int, read_all: bool) -> None:
    """Give the working directory to uid:gid and become that user for good.

    With `read_all`, CAP_DAC_READ_SEARCH is the one capability kept (effective and permitted):
    the program can read every file, as root could, but writes only where uid may.
    """
    os.chown(".", uid, gid)
    if read_all:
        _prctl(_PR_SET_KEEPCAPS, 1)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError(f"could not switch to uid {uid}")
    if read_all:
        import ctypes

        header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
        keep = 1 << _CAP_DAC_READ_SEARCH
        data = (ctypes.c_uint32 * 6)(keep, keep, 0, 0, 0, 0)  # effective, permitted, inheritable
        if ctypes.CDLL(None, use_errno=True).capset(header, data) != 0:
            raise OSError(ctypes.get_errno(), "capset(CAP_DAC_READ_SEARCH) failed")
        _prctl(_PR_SET_KEEPCAPS, 0)


def _set_limits(limits: dict[str, int]) -> None:
    """Set each named limit (e.g. {"RLIMIT_AS": 2**31}) as both soft and hard limit.

    A value above the current hard limit is lowered to it (only root could raise it).
    """
    for name, value in limits.items():
        kind = getattr(resource, name)
        hard = resource.getrlimit(kind)[1]
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(kind, (value, value))


def _read_program() -> str:
    """The program's source from stdin; stdin then reads from /dev/null."""
    source = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return source


def _refuse(*_args: object, **_kwargs: object) -> None:
    raise PermissionError("network access is disabled in the sandbox")


def _install_guard(workdir: str) -> None:
    """Disable destructive functions, sockets and writes outside `workdir` in this process.

    The first part is human-eval's ``reliability_guard`` (openai/human-eval,
    human_eval/execution.py), function for function. It is NOT a security boundary: a program
    can reach the same system calls through ``posix``, ``_posixsubprocess`` or ``ctypes``; the
    namespaces, the user switch and the resource limits are the boundary.
    """
    import _socket
    import io
    import shutil
    import socket
    import subprocess

    real_open = builtins.open
    real_os_open = os.open
    devnull = os.path.realpath(os.devnull)

    def inside(path: object) -> bool:
        full = os.path.realpath(os.path.join(workdir, os.fsdecode(path)))  # type: ignore[arg-type]
        return full in (devnull, workdir) or full.startswith(workdir + os.sep)

    def guarded_open(file, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        if (
            isinstance(file, (str, bytes, os.PathLike))
            and any(c in mode for c in "wax+")
            and not inside(file)
        ):
            raise PermissionError(f"writing outside the sandbox's directory is refused: {file!r}")
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[no-untyped-def]
        if flags & _WRITE_FLAGS and (dir_fd is not None or not inside(path)):
            raise PermissionError(f"writing outside the sandbox's directory is refused: {path!r}")
        return real_os_open(path, flags, mode, dir_fd=dir_fd)

    builtins.open = guarded_open
    io.open = guarded_open
    os.open = guarded_os_open

    class RefusedSocket(socket.socket):
        def __init__(self, *_args: object, **_kwargs: object) -> None:
            raise PermissionError("network access is disabled in the sandbox")

    socket.socket = RefusedSocket  # type: ignore[misc]
    socket.SocketType = RefusedSocket  # type: ignore[misc]
    _socket.socket = RefusedSocket  # type: ignore[misc]
    _socket.SocketType = RefusedSocket  # type: ignore[misc]
    for name in ("socketpair", "fromfd", "create_connection", "create_server"):
        setattr(socket, name, _refuse)
    _socket.socketpair = _refuse  # type: ignore[attr-defined]

    # human-eval's reliability_guard, in its order.
    faulthandler.disable()
    builtins.exit = None  # type: ignore[assignment]
    builtins.quit = None  # type: ignore[assignment]
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in (
        "kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid",
        "fork", "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink",
        "fchmod", "fchown", "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown",
        "getcwd", "chdir",
    ):  # fmt: skip
        setattr(os, name, None)
    shutil.rmtree = None  # type: ignore[assignment]
    shutil.move = None  # type: ignore[assignment]
    shutil.chown = None  # type: ignore[assignment]
    subprocess.Popen = None  # type: ignore[assignment, misc]
    builtins.help = None  # type: ignore[assignment]
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[name] = None  # type: ignore[assignment]


def main() -> None:
    """Set up, run the program, and leave with status 0 (ran to its end), 1 or 2."""
    exit_now = os._exit
    try:
        config = json.loads(sys.argv[1])
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)
        if config["uid"] is not None:
            _drop_privileges(config["uid"], config["gid"], config["read_all"])
        _set_limits(config["limits"])
        workdir = os.path.realpath(os.getcwd())
        source = _read_program()
    except Exception:
        traceback.print_exc()
        sys.stderr.write("sandbox: the setup before the program failed\n")
        sys.stderr.flush()
        exit_now(2)
    status = 0
    try:
        code = compile(source, _PROGRAM_NAME, "exec")
        linecache.cache[_PROGRAM_NAME] = (len(source), None, source.splitlines(True), _PROGRAM_NAME)
        _install_guard(workdir)
        exec(code, {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit as stop:
        sys.stderr.write(f"sandbox: the program raised SystemExit({stop.code!r}): a failure\n")
        status = 1
    except BaseException:
        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            status = status or 1
    exit_now(status)


if __name__ == "__main__":
    main()
