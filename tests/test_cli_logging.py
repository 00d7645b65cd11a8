"""One log: the library logs through `logging` (a logger per module, under "tying"), the CLI
formats the records (`tying VERB: message`) and sets the verbosity with -q / -v, before or
after the verb; no library module prints its progress itself."""

from __future__ import annotations

import argparse
import ast
import logging
import re
from pathlib import Path

import pytest

import tying.cli as cli

SRC = Path(__file__).resolve().parents[1] / "src" / "tying"

#: Modules that may call print: the CLI and its verbs (a verb prints its results).
PRINTS_ALLOWED = {"cli.py"}


def _verb_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every verb's run log one record of each kind."""

    def build_parser(verb: str) -> argparse.ArgumentParser:
        parser = cli.VerbParser(prog=f"tying {verb}")
        parser.add_argument("--debug", action="store_true")
        parser.add_argument(*cli.QUIET_FLAGS, action="count", default=0)
        parser.add_argument(*cli.VERBOSE_FLAGS, action="count", default=0)

        def run(args: argparse.Namespace) -> int:
            ours = logging.getLogger("tying.somewhere")
            ours.debug("a detail")
            ours.info("step 3 of 5")
            ours.warning("a checkpoint was skipped")
            other = logging.getLogger("otherlib.module")
            other.debug("third-party detail")
            other.info("third-party info")
            other.warning("third-party warning")
            print("result")
            return 0

        parser.set_defaults(_run=run)
        return parser

    monkeypatch.setattr(cli, "build_parser", build_parser)


def _lines(capsys: pytest.CaptureFixture[str], argv: list[str]) -> list[str]:
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out == "result\n"  # results on stdout, whatever the verbosity
    return captured.err.splitlines()


def test_default_format_and_levels(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _verb_logging(monkeypatch)
    assert _lines(capsys, ["train"]) == [
        "tying train: step 3 of 5",
        "tying train: warning: a checkpoint was skipped",
        "tying train: warning: [otherlib.module] third-party warning",
    ]


@pytest.mark.parametrize("argv", [["-q", "train"], ["train", "-q"], ["train", "--quiet"]])
def test_quiet_shows_our_warnings_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    _verb_logging(monkeypatch)
    assert _lines(capsys, argv) == ["tying train: warning: a checkpoint was skipped"]


@pytest.mark.parametrize("argv", [["-v", "train"], ["train", "--verbose"]])
def test_verbose_shows_our_debug_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    _verb_logging(monkeypatch)
    assert _lines(capsys, argv) == [
        "tying train: debug: [tying.somewhere] a detail",
        "tying train: step 3 of 5",
        "tying train: warning: a checkpoint was skipped",
        "tying train: [otherlib.module] third-party info",
        "tying train: warning: [otherlib.module] third-party warning",
    ]


def test_vv_shows_every_library_s_debug_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _verb_logging(monkeypatch)
    lines = _lines(capsys, ["-vv", "train"])
    assert "tying train: debug: [otherlib.module] third-party detail" in lines
    assert len(lines) == 6


def test_the_cli_leaves_logging_as_it_found_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _verb_logging(monkeypatch)
    root, ours = logging.getLogger(), logging.getLogger("tying")
    before = (list(root.handlers), root.level, ours.level)
    _lines(capsys, ["-v", "train"])
    assert (list(root.handlers), root.level, ours.level) == before


def test_log_levels() -> None:
    assert cli.log_levels(-2) == cli.log_levels(-1) == (logging.WARNING, logging.ERROR)
    assert cli.log_levels(0) == (logging.INFO, logging.WARNING)
    assert cli.log_levels(1) == (logging.DEBUG, logging.INFO)
    assert cli.log_levels(3) == (logging.DEBUG, logging.DEBUG)


def test_every_verb_takes_the_verbosity_flags() -> None:
    for verb in cli.VERBS:
        flags = {f for a in cli.build_parser(verb)._actions for f in a.option_strings}
        assert {*cli.QUIET_FLAGS, *cli.VERBOSE_FLAGS} <= flags, verb


def _library_modules() -> list[tuple[str, ast.Module]]:
    modules = []
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        if name.startswith("commands/") or name in PRINTS_ALLOWED:
            continue
        modules.append((name, ast.parse(path.read_text())))
    return modules


def test_the_library_prints_nothing() -> None:
    """No print calls and no `log=print` defaults: progress goes to `logging`."""
    offenders = []
    for name, tree in _library_modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "print":
                offenders.append(f"{name}:{node.lineno}")
    assert offenders == []


#: Calls whose text is a message to the user.
MESSAGE_CALLS = {"print", "write", "debug", "info", "warning", "error", "critical", "warn", "log"}


def _messages(tree: ast.Module) -> list[ast.Constant]:
    """The string constants inside message calls (print, log records, warnings) and raises."""
    found = []
    for node in ast.walk(tree):
        func = node.func if isinstance(node, ast.Call) else None
        name = getattr(func, "attr", None) or getattr(func, "id", None)
        if isinstance(node, ast.Raise) or name in MESSAGE_CALLS or name == "_log":
            found += [
                n
                for n in ast.walk(node)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            ]
    return found


def test_the_library_names_no_verb_in_its_messages() -> None:
    """ "tying train:" and the like are the CLI's to add (its log format)."""
    offenders = []
    for name, tree in _library_modules():
        for node in _messages(tree):
            words = node.value.split()
            if len(words) >= 2 and words[0] == "tying" and words[1][:-1] in cli.VERBS:
                offenders.append(f"{name}:{node.lineno}: {node.value!r}")
    assert offenders == []


def test_the_probe_s_stderr_log_is_deprecated() -> None:
    from tying.probe import stderr_log
    from tying.probe.stages import stage_log

    with pytest.warns(DeprecationWarning, match="the probe logs through logging"):
        assert stderr_log() is stage_log


def test_leading_flags_before_the_verb() -> None:
    assert cli._leading_verbosity(["-qq", "train", "x=1"]) == (-2, ["train", "x=1"])
    assert cli._leading_verbosity(["-v", "--debug", "--verbose", "train", "-q"]) == (
        2,
        ["train", "--debug", "-q"],
    )
    assert cli._leading_verbosity(["train", "-v"]) == (0, ["train", "-v"])
    assert cli._leading_verbosity(["-vq", "train"]) == (0, ["-vq", "train"])


def test_the_library_names_no_cli_flag_in_its_messages() -> None:
    """The library names its options (`max_tokens`), not the CLI's flags (`--max-tokens`): a
    Python caller has no flags, and the CLI maps one to the other."""
    flag = re.compile(r"(^|[\s`(])(?<!pip install )--[a-z]")
    offenders = [
        f"{name}:{node.lineno}: {node.value!r}"
        for name, tree in _library_modules()
        if name != "evaluation/harness_cli.py"  # lm-eval's own command line
        for node in _messages(tree)
        if flag.search(node.value)
    ]
    assert offenders == []


def test_the_projects_own_deprecations_reach_the_terminal_once(tmp_path, capsys) -> None:
    """Python hides DeprecationWarnings outside __main__; a renamed config key must still tell
    the user its new name (one warning line), while other libraries' stay hidden."""
    import warnings

    status = cli.main(
        ["train", "tie=pit", "pit_t_scale=2", "data=/nonexistent", "--out", str(tmp_path / "r")]
    )
    err = capsys.readouterr().err.splitlines()
    assert status == 2
    assert err[0] == (
        "tying train: warning: deprecated: config: key 'pit_t_scale' is now pit.t_scale "
        "(section 'pit'); the old name will be removed in tying 0.3"
    )
    # once: no second warning line (an info line, e.g. the training text's budget, may come
    # before the error)
    assert sum("warning: deprecated" in line for line in err) == 1
    assert err[-1].startswith("tying train: error: corpus path not found")
    # Outside a verb the filters are as before.
    assert not any(getattr(f[1], "pattern", None) == cli._OWN_DEPRECATION for f in warnings.filters)
