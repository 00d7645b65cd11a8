"""`tying evaluate` writes nothing a user would read as a failure: run from a folder outside any
git checkout (lm-eval asks git for a commit hash), on a tiny local model, the terminal shows
no `fatal:` line, no deprecation warning and none of lm-eval's warnings about an instantiated
model; those go to the log at debug level."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tying
from tying.evaluation.evaluate import quiet_git_commit_hash

from ._harness_models import eval_model_dir  # noqa: F401

NOISE = ("fatal:", "deprecat", "futurewarning", "not of type `str`", "already-initialized")


def _outside_git(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working folder in which git finds no repository, and the environment that makes sure
    of it (no GIT_DIR, a ceiling above the folder)."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CEILING_DIRECTORIES"] = str(tmp_path)
    # the tying under test first, then the rest of PYTHONPATH (where packages may be installed,
    # as on a machine that adds them by `pip install --target`), each entry made absolute since
    # the working folder changes
    entries = [str(Path(tying.__file__).resolve().parents[1])]
    entries += [str(Path(e).resolve()) for e in env.get("PYTHONPATH", "").split(os.pathsep) if e]
    env["PYTHONPATH"] = os.pathsep.join(entries)
    probe = subprocess.run(
        ["git", "rev-parse", "--git-dir"], cwd=cwd, env=env, capture_output=True, check=False
    )
    assert probe.returncode != 0, "the test folder is inside a git checkout"
    return cwd, env


def test_evaluate_outside_git_prints_no_noise(eval_model_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    cwd, env = _outside_git(tmp_path)
    argv = [sys.executable, "-m", "tying", "evaluate", str(eval_model_dir), "--tasks", "gsm8k"]
    argv += ["--limit", "1", "--max-new-tokens", "2", "--num-fewshot", "0", "--out", "out"]
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "wrote out/results.json"
    terminal = (done.stdout + done.stderr).lower()
    for noise in NOISE:
        assert noise not in terminal, (noise, done.stderr)


def test_the_git_probe_is_quiet_outside_a_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    cwd, env = _outside_git(tmp_path)
    monkeypatch.chdir(cwd)
    for key in [k for k in os.environ if k.startswith("GIT_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", env["GIT_CEILING_DIRECTORIES"])
    assert quiet_git_commit_hash() is None
    assert capfd.readouterr().err == ""  # git's "fatal: ..." went to the log, not fd 2


def test_expected_lm_eval_warnings_go_to_debug(caplog: pytest.LogCaptureFixture) -> None:
    from lm_eval.models.huggingface import HFLM

    from tying.evaluation.harness import (
        EXPECTED_LM_EVAL_WARNINGS,
        _expected_lm_eval_warnings_at_debug,
    )

    caplog.set_level(logging.DEBUG)
    lm_eval_log = logging.getLogger(HFLM.__module__)
    with _expected_lm_eval_warnings_at_debug():
        for message in EXPECTED_LM_EVAL_WARNINGS:
            lm_eval_log.warning(message + " (and the rest of lm-eval's sentence)")
        lm_eval_log.warning("something else")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["something else"]
    debug = [r for r in caplog.records if r.name == "tying.evaluation.harness"]
    assert len(debug) == 2 and all(r.levelno == logging.DEBUG for r in debug)
