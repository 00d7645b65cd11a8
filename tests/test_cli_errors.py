"""The CLI's one error path: bad input (a `tying.errors.UserError`: ConfigError, TokenIdError,
a user's missing, existing or unreadable file, ...) is one line with exit status 2; a bug (a
ValueError or OSError of our own code, IndexError, KeyError, NotImplementedError, ...) keeps
its traceback and exits with 1."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import tying.cli as cli
from tying.config import ConfigError
from tying.errors import (
    ExistingFileError,
    InvalidInputError,
    MissingFileError,
    UnreadableFileError,
    UserError,
    read_json,
    read_text,
)
from tying.interface.token_ids import TokenIdError
from tying.train.lock import RunFolderInUseError


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
        InvalidInputError("bad value: use 3"),
        ConfigError("unknown key 'x'; valid keys are ['y']"),
        TokenIdError("token id 70 is outside the vocabulary [0, 64)"),
        MissingFileError("no such file: x.yaml"),
        ExistingFileError("out is not empty: pass --overwrite"),
        UnreadableFileError("config file x.yaml is not UTF-8 text"),
        RunFolderInUseError("run folder out is in use by process 12"),
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
    [
        ValueError("Z must have orthonormal columns"),  # an internal contract of our code
        FileNotFoundError(2, "No such file or directory", "/opt/tying/missing.json"),
        IndexError("list index out of range"),
        KeyError("w"),
        NotImplementedError("todo"),
    ],
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
    for bug in (ValueError, OSError, FileNotFoundError, IndexError, KeyError, TypeError):
        assert not issubclass(bug, cli.USER_ERRORS), bug
    # still caught where the builtin errors were caught before
    assert issubclass(TokenIdError, IndexError) and issubclass(TokenIdError, ValueError)
    assert issubclass(ConfigError, ValueError) and issubclass(InvalidInputError, ValueError)
    assert issubclass(MissingFileError, FileNotFoundError)
    assert issubclass(RunFolderInUseError, FileExistsError)
    for error in (ConfigError, TokenIdError, InvalidInputError, MissingFileError):
        assert issubclass(error, UserError), error


def test_a_users_unreadable_file_is_one_line_naming_it(tmp_path: Path) -> None:
    """JSONDecodeError, UnicodeDecodeError, a folder for a file: a UserError that names it."""
    bad_json, latin1, folder = tmp_path / "a.json", tmp_path / "b.txt", tmp_path / "c"
    bad_json.write_text('{"lr": 3e-4,')
    latin1.write_bytes("caf\xe9".encode("latin-1"))
    folder.mkdir()
    with pytest.raises(UnreadableFileError, match=r"a\.json is not valid JSON: .*line 1"):
        read_json(bad_json)
    with pytest.raises(UnreadableFileError, match=r"b\.txt is not UTF-8 text \(byte 3"):
        read_text(latin1)
    with pytest.raises(UnreadableFileError, match="cannot read file .*c"):
        read_text(folder)
    with pytest.raises(MissingFileError, match="no such config file: .*nope"):
        read_text(tmp_path / "nope", "config file")


def _one_line(capsys: pytest.CaptureFixture[str], verb: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tying {verb}: error: "), err
    return lines[0]


def test_user_mistakes_across_verbs_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real verbs, real mistakes (no monkeypatched error): one line, exit status 2."""
    monkeypatch.delenv("TYING_DEBUG", raising=False)
    assert cli.main(["train", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml does not exist" in _one_line(capsys, "train")
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("lr: 3e-4 # caf\xe9\n".encode("latin-1"))
    assert cli.main(["train", str(latin1)]) == 2
    assert "latin1.yaml is not UTF-8 text" in _one_line(capsys, "train")
    assert cli.main(["train", "lr=fast"]) == 2
    assert "lr must be a number" in _one_line(capsys, "train")
    assert cli.main(["params", "tiny", "--tie", "pit", "--vocab", "10"]) == 2
    assert "needs vocab_size >= d_model" in _one_line(capsys, "params")
    assert cli.main(["export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in _one_line(capsys, "export")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert cli.main(["export", str(broken), "--out", str(tmp_path / "o")]) == 2
    assert "config.json is not valid JSON" in _one_line(capsys, "export")
    assert cli.main(["plot", str(tmp_path)]) == 2
    assert "metrics.jsonl does not exist" in _one_line(capsys, "plot")


def test_an_internal_value_error_in_a_verb_keeps_its_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ValueError of our own code under a real verb is a bug: traceback, exit status 1."""
    import tying.decoder.params as params

    def broken(options):
        raise ValueError("n_heads * head_dim must equal d_model (an internal contract)")

    monkeypatch.setattr(params, "preset_parameters", broken)
    monkeypatch.delenv("TYING_DEBUG", raising=False)
    assert cli.main(["params", "tiny"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "in broken" in err
    assert err.splitlines()[-1].startswith("tying params: error: ValueError: n_heads")


def test_a_failure_with_its_own_status_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class DivergedError(RuntimeError):
        exit_status = 1

    _run_raising(monkeypatch, DivergedError("the loss is NaN at step 3"))
    assert cli.main(["train"]) == 1
    assert capsys.readouterr().err == "tying train: error: the loss is NaN at step 3\n"


def test_debug_re_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    _run_raising(monkeypatch, ConfigError("bad"))
    with pytest.raises(ConfigError, match="bad"):
        cli.main(["train", "--debug"])


def test_user_errors_name_the_flag_the_library_s_option_is(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The library says "set overwrite" (its option); the CLI says "pass --overwrite"."""
    _run_raising(
        monkeypatch,
        ExistingFileError(
            "out is not empty: choose another output folder, or set overwrite to replace it"
        ),
    )
    assert cli.main(["tokenize"]) == 2
    assert capsys.readouterr().err == (
        "tying tokenize: error: out is not empty: choose another output folder, or pass "
        "--overwrite to replace it\n"
    )
    assert cli.cli_wording("set max_tokens to 0 for all; set TYING_DATA_DIR to X") == (
        "pass --max-tokens to 0 for all; set TYING_DATA_DIR to X"
    )
