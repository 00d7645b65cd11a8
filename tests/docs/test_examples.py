"""Every command block of README.md and docs/*.md runs as written.

The fenced ```bash, ```sh and ```console blocks (and the ```python ones) are extracted and each
runs in a temporary folder, shrunk by `TYING_EXAMPLE_BUDGET=tiny` (`tying.example_budget`: a
couple of steps, a few hundred tokens, one item), never by editing its text:

- a bash/sh block runs as one `bash -e -o pipefail` script; a console block runs its `$ `
  lines; a python block runs as a script;
- the folder holds links to the repository's configs/, benchmarks/ and src/ (the examples are
  written for the repository's root), `tying`, `python` and `torchrun` are this environment's,
  the shard and model caches are shared by the session;
- the runs an example reads but does not make (`runs/tt`, `runs/pit` of the README, the
  adapter `runs/mbpp` of docs/updates.md) are made once per session by the same commands, tiny,
  and linked into its folder;
- a block that cannot run here (a GPU, the network, pip installs, hours of work) is marked by
  the line `<!-- example: skip — REASON -->` directly above its fence; a skip without a reason
  fails, and so does an untagged block that holds a `tying` command (tag it bash, or text for a
  synopsis that is not meant to run).

Blocks that load SmolLM2 or run a grid are marked slow (`pytest -m slow`); the others run by
default (about a minute on 2 cores).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from studies.doc_blocks import Block, blocks_of
from tying.paths import data_dir

ROOT = Path(__file__).resolve().parents[2]
#: The pages whose examples run: README.md and every docs/*.md (new pages are picked up).
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Languages whose blocks run.
RUN_LANGUAGES = {"bash", "sh", "console", "python"}
#: A block is slow when it loads the real model or runs a grid, an update or an evaluation.
_SLOW = re.compile(
    r"smollm2|tying (?:experiment|demo|evaluate|finetune|side-effects|convert|lens|trace)"
    r"|lm_eval|harness_cli|\bmodel="
)
#: Runs that examples read without making them, and the commands that make them (tiny).
PREREQUISITES = {
    "runs/tt": "tying train tie=tt --out runs/tt",
    "runs/pit": "tying train tie=pit --out runs/pit",
    "runs/mbpp": "tying finetune smollm2 --task mbpp --out runs/mbpp --max-steps 100",
}
#: Seconds a block may take (it is tiny: a hung block fails instead of stalling the suite).
TIMEOUT_S = 900


ALL_BLOCKS = [b for page in PAGES for b in blocks_of(page)]
RUNNABLE = [b for b in ALL_BLOCKS if b.language in RUN_LANGUAGES]


def _param(block: Block):
    marks = [pytest.mark.slow] if _SLOW.search(block.text) else []
    return pytest.param(block, id=block.where, marks=marks)


def test_pages_are_found() -> None:
    assert ROOT / "README.md" in PAGES and len(PAGES) > 5
    assert any(b.page.name == "README.md" and b.language == "bash" for b in RUNNABLE)


@pytest.mark.parametrize("block", [pytest.param(b, id=b.where) for b in ALL_BLOCKS])
def test_markers_are_well_formed(block: Block) -> None:
    """A marker is `example: skip — REASON` with a reason; a block holding `tying` commands is
    tagged bash/sh/console (or text, for a synopsis that is not meant to run)."""
    if block.marker is not None:
        reason = block.skip_reason
        assert reason is not None, f"{block.where}: unknown marker {block.marker!r}"
        assert reason, f"{block.where}: a skip needs a reason: <!-- example: skip — REASON -->"
    if block.language == "":
        commands = [
            line for line in block.text.splitlines() if re.match(r"\s*(\$ )?tying \w", line)
        ]
        assert not commands, (
            f"{block.where}: an untagged block with commands ({commands[0].strip()!r}): tag it "
            "bash to run it, or text for a synopsis"
        )


@pytest.fixture(scope="session")
def example_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of every example: the tiny budget, this interpreter's tools first on
    PATH, this checkout's code, one cache for the session, no network."""
    bin_dir = tmp_path_factory.mktemp("bin")
    for tool in ("tying", "torchrun", "lm_eval"):
        found = Path(sys.executable).with_name(tool)
        if found.exists():
            (bin_dir / tool).symlink_to(found)
    # shims, not links: a link to a venv's interpreter (itself a link) runs outside the venv
    _shim(bin_dir / "python", f'"{sys.executable}"')
    _shim(bin_dir / "python3", f'"{sys.executable}"')
    if not (bin_dir / "tying").exists():  # a checkout on PYTHONPATH, not installed (a GPU machine)
        _shim(bin_dir / "tying", f'"{sys.executable}" -m tying')
    env = dict(os.environ)
    env.update(
        TYING_EXAMPLE_BUDGET="tiny",
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        ),
        TYING_CACHE_DIR=env.get("TYING_CACHE_DIR") or str(tmp_path_factory.mktemp("cache")),
        # the examples run in a temporary folder: `../shared/data` must not be resolved from it
        TYING_DATA_DIR=str(data_dir()),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def _shim(path: Path, command: str) -> None:
    """An executable sh script at `path` that runs `command` with its arguments."""
    path.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
    path.chmod(0o755)


def _run(script: str, language: str, cwd: Path, env: dict[str, str]) -> None:
    if language == "python":
        argv = [sys.executable, "-c", script]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", script]
    result = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    if result.returncode != 0:
        raise AssertionError(
            f"exit status {result.returncode}\n--- stdout (end)\n{result.stdout[-3000:]}\n"
            f"--- stderr (end)\n{result.stderr[-4000:]}"
        )


def _workdir(path: Path) -> Path:
    """A folder like the repository's root: configs/, benchmarks/, src/ linked."""
    path.mkdir(parents=True, exist_ok=True)
    for name in ("configs", "benchmarks", "src"):
        if not (path / name).exists():
            (path / name).symlink_to(ROOT / name)
    return path


@pytest.fixture(scope="session")
def prerequisites(tmp_path_factory: pytest.TempPathFactory, example_env: dict[str, str]):
    """`get(name)`: the folder of a prerequisite run (made once per session)."""
    folder = _workdir(tmp_path_factory.mktemp("prerequisites"))

    def get(name: str) -> Path:
        if not (folder / name).exists():
            _run(PREREQUISITES[name], "bash", folder, example_env)
        return folder / name

    return get


def _console_commands(text: str) -> str:
    return "\n".join(line[2:] for line in text.splitlines() if line.startswith("$ "))


@pytest.mark.parametrize("block", [_param(b) for b in RUNNABLE])
def test_example_runs_as_written(block: Block, tmp_path: Path, example_env, prerequisites) -> None:
    if block.skip_reason:
        pytest.skip(f"{block.where}: {block.skip_reason}")
    cwd = _workdir(tmp_path / "work")
    for name in PREREQUISITES:
        made_here = re.search(rf"(--out[ =]|\bout=){re.escape(name)}(?=\s|$)", block.text)
        if re.search(rf"(?<![\w/]){re.escape(name)}\b", block.text) and not made_here:
            (cwd / "runs").mkdir(exist_ok=True)
            (cwd / name).symlink_to(prerequisites(name))
    script = _console_commands(block.text) if block.language == "console" else block.text
    try:
        _run(script, block.language, cwd, example_env)
    except AssertionError as e:
        raise AssertionError(f"{block.where} ({block.language}) failed: {e}") from None
    finally:
        shutil.rmtree(cwd / "runs", ignore_errors=True)  # checkpoints are large
