"""The CLI's one error path: bad input (ValueError and the project's own errors, missing or
existing files) is one line with exit status 2; a bug (IndexError, KeyError,
NotImplementedError, ...) keeps its traceback and exits with 1."""

from __future__ import annotations

import argparse

import pytest

import tying.cli as cli
from tying.config import ConfigError
from tying.interface.loss import TokenIdError


def _run_raising(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    """Make every verb's run raise `error`."""

    def build_parser(verb: str) -> argparse.ArgumentParser:
        parser = cli.VerbParser(prog=f"tying {verb}")
        parser.add_argument("--debug", action="store_true")

        def run(args: argparse.Namespace) -> int:
            raise error

        parser.set_defaults(_run=run)
        return parser

    monkeypatch.setattr(cli, "build_parser", build_parser)
    monkeypatch.delenv("TYING_DEBUG", raising=False)


@pytest.mark.parametrize(
    "error",
    [
        ValueError("bad value: use 3"),
        ConfigError("unknown key 'x'; valid keys are ['y']"),
        TokenIdError("token id 70 is outside the vocabulary [0, 64)"),
        FileNotFoundError("no such file: x.yaml"),
        FileExistsError("out is not empty: pass --overwrite"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_user_errors_are_one_line_with_status_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: BaseException
) -> None:
    _run_raising(monkeypatch, error)
    assert cli.main(["train"]) == 2
    err = capsys.readouterr().err
    assert err == f"tying train: error: {error}\n"


@pytest.mark.parametrize(
    "error",
    [IndexError("list index out of range"), KeyError("w"), NotImplementedError("todo")],
    ids=lambda e: type(e).__name__,
)
def test_bugs_keep_their_traceback_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: BaseException
) -> None:
    _run_raising(monkeypatch, error)
    assert cli.main(["train"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert f"{type(error).__name__}: " in err
    assert err.splitlines()[-1].startswith(f"tying train: error: {type(error).__name__}: ")


def test_bugs_are_not_user_errors() -> None:
    for bug in (IndexError, KeyError, NotImplementedError, TypeError, RuntimeError):
        assert not issubclass(bug, cli.USER_ERRORS), bug
    assert issubclass(TokenIdError, IndexError)  # still caught where an IndexError was


def test_a_failure_with_its_own_status_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class DivergedError(RuntimeError):
        exit_status = 1

    _run_raising(monkeypatch, DivergedError("the loss is NaN at step 3"))
    assert cli.main(["train"]) == 1
    assert capsys.readouterr().err == "tying train: error: the loss is NaN at step 3\n"


def test_debug_re_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    _run_raising(monkeypatch, ValueError("bad"))
    with pytest.raises(ValueError, match="bad"):
        cli.main(["train", "--debug"])
