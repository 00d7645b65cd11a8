"""`tying <verb>`: one verb per capability; the CLI parses and calls one library function.

Each verb lives in its own module under `tying.commands`, imported only when that verb runs,
so `tying --help` imports neither torch nor any verb. A verb module provides:

    add_arguments(parser)      its flags, generated from its options dataclass
                               (`tying.config_flags.add_config_arguments`)
    run(args) -> int | None    builds the options and calls the library function

One log for every verb: the library logs through `logging` (a logger per module, under
"tying"); `main` sends the records to stderr as `tying VERB: message` (`tying VERB: warning:
...` for warnings), at INFO for tying and WARNING for other libraries; `-q` / `--quiet` shows
tying's warnings only, `-v` / `--verbose` its debug lines too (`-vv`: every library's). The
flags go before or after the verb (`tying -q train ...`, `tying train ... -q`). A verb prints
a short human summary of its result to stdout, or its JSON with `--json`, and writes the JSON
into its output folder (`tying.commands.report`); progress bars stay on stderr.

One error path for every verb (`main`): bad input (`USER_ERRORS`: a `tying.errors.UserError`,
which includes `tying.config.ConfigError`, `tying.interface.loss.TokenIdError` and a missing,
existing or unreadable file the user named) prints ONE line, `tying VERB: error: ...`, and
exits with status 2; a failure the library explains itself (an exception with an
`exit_status`, e.g. a diverged run) prints its message and exits with that status; anything
else (a ValueError or OSError of our own code, IndexError, KeyError, ...) is a bug: its
traceback is printed, then one line, and the exit status is 1. `--debug` (or TYING_DEBUG=1)
re-raises every error with its traceback.
Ctrl-C exits with 130; a training run interrupted by SIGINT or SIGTERM (its session writes a
checkpoint first) exits with the session's status, 130 or 143, after one line saying where.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import logging
import os
import re
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from typing import NoReturn, TextIO

from tying.config import flag_name
from tying.errors import UserError

#: verb -> (module, one-line help). Add one line here per new verb.
VERBS: dict[str, tuple[str, str]] = {
    "info": ("tying.commands.info", "print versions of tying, torch and transformers, and devices"),
    "train": (
        "tying.commands.train",
        "train our decoder (scratch) or a converted Hugging Face model (teacher mode)",
    ),
    "eval": (
        "tying.commands.eval",
        "loss on a text: loss and perplexity of any model (benchmark tasks: evaluate)",
    ),
    "tokenize": ("tying.commands.tokenize", "tokenize a corpus into token shards"),
    "params": ("tying.commands.params", "parameter counts of a decoder preset (closed form)"),
    "convert": (
        "tying.commands.convert",
        "convert a Hugging Face causal LM's embedding and head to an untied/TT/PIT interface",
    ),
    "export": (
        "tying.commands.export",
        "export a converted model as a standard transformers checkpoint",
    ),
    "lens": ("tying.commands.lens", "logit / tuned lens: KL(final || lens) per layer, bits/token"),
    "trace": (
        "tying.commands.trace",
        "transition trace: input-side vs output-side anchor tokens per layer",
    ),
    "plot": ("tying.commands.plot", "plot a metric of one or more runs against step"),
    "probe": (
        "tying.commands.probe",
        "interface consistency, parameters, norms, drift; with --against: alignment, KNN, spectral",
    ),
    "finetune": (
        "tying.commands.finetune",
        "LoRA update of any model on MBPP, GSM8K or a prompt/completion JSONL file",
    ),
    "add-tokens": (
        "tying.commands.add_tokens",
        "add new tokens to any model's vocabulary (untied, TT, PIT; tokenizer included)",
    ),
    "evaluate": (
        "tying.commands.evaluate",
        "benchmark tasks: GSM8K, SVAMP, MBPP, HumanEval through lm-eval (loss on a text: eval)",
    ),
    "side-effects": (
        "tying.commands.side_effects",
        "what an update changed besides its target: KL, loss, top-1, lens, interface, tasks",
    ),
    "experiment": (
        "tying.commands.experiment",
        "train a grid of runs at one token budget and write a side-by-side report",
    ),
    "demo": (
        "tying.commands.demo",
        "the main job: SmolLM2 -> TT and PIT, continued pretraining, lens, report",
    ),
}

#: Exceptions that mean "the input was wrong": one line, exit status 2. Only the project's
#: `tying.errors.UserError` (`ConfigError`, `TokenIdError`, the user's file errors...): a
#: ValueError or an OSError of our own code is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (UserError,)


#: The global flags of verbosity, before the verb or among its own flags.
QUIET_FLAGS = ("-q", "--quiet")
VERBOSE_FLAGS = ("-v", "--verbose")


class VerbParser(argparse.ArgumentParser):
    """argparse with a one-line error (`tying VERB: error: ... (see tying VERB --help)`)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def top_help() -> str:
    """The text of `tying --help` (no verb module imported)."""
    from tying import __version__

    width = max(map(len, VERBS))
    lines = [
        f"usage: tying VERB [options]      (tying {__version__})",
        "",
        "The token interface of language models: build, train, update, measure.",
        "",
        "verbs:",
        *(f"  {verb:<{width}}  {help_text}" for verb, (_, help_text) in VERBS.items()),
        "",
        "`tying VERB --help` lists every option of a verb with its default and unit.",
        "Every verb prints a short summary and writes its JSON into its output folder; --json",
        "prints the JSON on stdout instead.",
        "Every verb takes --debug (or TYING_DEBUG=1) to show a traceback on error, -q (warnings",
        "only) and -v (debug lines; -vv: every library's too), before or after the verb.",
    ]
    return "\n".join(lines)


def build_parser(verb: str) -> argparse.ArgumentParser:
    """The parser of one verb (its module imported)."""
    module_path, help_text = VERBS[verb]
    module = importlib.import_module(module_path)
    parser = VerbParser(
        prog=f"tying {verb}", description=help_text[0].upper() + help_text[1:] + "."
    )
    module.add_arguments(parser)
    parser.add_argument(  # read by `tying.commands.report`, which every verb calls
        "--json",
        action="store_true",
        help="print the result as JSON on stdout instead of the summary (nothing else on "
        "stdout; logs stay on stderr)",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the full traceback when something fails"
    )
    parser.add_argument(
        *QUIET_FLAGS, action="count", default=0, help="log warnings only (no progress lines)"
    )
    parser.add_argument(
        *VERBOSE_FLAGS,
        action="count",
        default=0,
        help="log debug lines too (-vv: those of other libraries as well)",
    )
    parser.set_defaults(_run=module.run)
    return parser


def log_levels(verbosity: int) -> tuple[int, int]:
    """(level of the tying loggers, level of every other library's) for a verbosity: the
    number of -v flags minus the number of -q flags."""
    if verbosity < 0:
        return logging.WARNING, logging.ERROR
    if verbosity == 0:
        return logging.INFO, logging.WARNING
    if verbosity == 1:
        return logging.DEBUG, logging.INFO
    return logging.DEBUG, logging.DEBUG


class _StderrHandler(logging.StreamHandler):
    """A stream handler writing to the `sys.stderr` of the moment (tests replace it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        """Always the current `sys.stderr`."""
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        """Ignored: the stream is looked up on each record."""


class LogFormatter(logging.Formatter):
    """`PROG: message`; `PROG: warning: message` (and error, critical); other libraries' and
    debug records name their logger: `PROG: debug: [tying.kernels] message`."""

    def __init__(self, prog: str) -> None:
        super().__init__()
        self.prog = prog

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        ours = record.name == "tying" or record.name.startswith("tying.")
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        source = "" if ours and record.levelno > logging.DEBUG else f"[{record.name}] "
        return f"{self.prog}: {level}{source}{message}"


@contextlib.contextmanager
def cli_logging(prog: str, verbosity: int) -> Iterator[None]:
    """Log records to stderr in the CLI's format while a verb runs (see the module docstring);
    the handler and levels are restored afterwards."""
    root, ours = logging.getLogger(), logging.getLogger("tying")
    saved = root.level, ours.level
    handler = _StderrHandler()
    handler.setFormatter(LogFormatter(prog))
    ours_level, others_level = log_levels(verbosity)
    root.addHandler(handler)
    ours.setLevel(ours_level)
    root.setLevel(others_level)
    try:
        with warnings.catch_warnings():
            _log_own_deprecations(ours)
            yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        ours.setLevel(saved[1])


#: The project's own deprecation messages (`tying._compat`, `tying.config`) end with this.
_OWN_DEPRECATION = r".*will be removed in tying"


def _log_own_deprecations(log: logging.Logger) -> None:
    """Show the project's DeprecationWarnings (a renamed config key, a moved name), which Python
    hides outside __main__, as one warning line each; other warnings are shown as before.
    Call inside `warnings.catch_warnings()`, which restores both settings."""
    warnings.filterwarnings("default", category=DeprecationWarning, message=_OWN_DEPRECATION)
    show = warnings.showwarning

    def show_own(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, DeprecationWarning) and re.match(_OWN_DEPRECATION, str(message)):
            log.warning("deprecated: %s", message)
        else:
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = show_own


def _flag_verbosity(flag: str) -> int | None:
    """The verbosity of one -q/-v flag (-qq: -2, --verbose: 1); None for any other argument."""
    if flag in ("--quiet", "--verbose"):
        return -1 if flag == "--quiet" else 1
    if len(flag) > 1 and flag[0] == "-" and len(set(flag[1:])) == 1 and flag[1] in "qv":
        return (len(flag) - 1) * (-1 if flag[1] == "q" else 1)
    return None


def _leading_verbosity(args: list[str]) -> tuple[int, list[str]]:
    """The verbosity of the -q/-v flags given before the verb, and the arguments without them
    (a `--debug` given there moves to just after the verb, for the verb's parser)."""
    verbosity, rest, debug = 0, list(args), []
    while rest and (rest[0] == "--debug" or _flag_verbosity(rest[0]) is not None):
        flag = rest.pop(0)
        if flag == "--debug":
            debug = [flag]
        else:
            verbosity += _flag_verbosity(flag) or 0
    return verbosity, rest[:1] + debug + rest[1:]


def _fail(verb: str, message: str, status: int) -> int:
    """Print `tying VERB: error: MESSAGE` (first line of the message only); return `status`."""
    first = " ".join(str(message).split("\n")[0].split()) or "(no message)"
    prog = f"tying {verb}" if verb else "tying"
    # One write per line: the ranks of a process group share stderr, and print's separate
    # write of the newline let two ranks' errors run together on one line.
    sys.stderr.write(f"{prog}: error: {first}\n")
    sys.stderr.flush()
    return status


#: "set NAME to ..." in a library message: an option named as a Python caller sets it.
_SET_OPTION = re.compile(r"\bset ([a-z][a-z0-9_]*) to\b")


def cli_wording(message: str) -> str:
    """A library message in the CLI's words: an option the message asks to set ("set
    overwrite to replace it") becomes the flag that sets it ("pass --overwrite to replace
    it"); the library names options, not flags (a Python caller has none)."""
    return _SET_OPTION.sub(lambda m: f"pass {flag_name(m.group(1))} to", message)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `tying` console script; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list or os.environ.get("TYING_DEBUG", "") not in ("", "0")
    verbosity, args_list = _leading_verbosity(args_list)
    if not args_list or args_list[0] in ("-h", "--help"):
        print(top_help())
        return 0
    if args_list[0] == "--version":
        from tying import __version__

        print(f"tying {__version__}")
        return 0
    verb = args_list[0]
    if verb not in VERBS:
        close = difflib.get_close_matches(verb, VERBS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "; see `tying --help`"
        return _fail("", f"unknown verb {verb!r}{hint}", 2)
    try:
        parser = build_parser(verb)
        # options and positionals in any order (`tying train tie=tt --out X resume=true`)
        args = parser.parse_intermixed_args(args_list[1:])
        verbosity += getattr(args, "verbose", 0) - getattr(args, "quiet", 0)
        with cli_logging(f"tying {verb}", verbosity):
            return int(args._run(args) or 0)
    except SystemExit as e:  # argparse (--help, usage errors) and verbs that exit
        return int(e.code) if isinstance(e.code, int) else (0 if e.code is None else 2)
    except KeyboardInterrupt as e:  # a run session's RunInterrupted says where its work is
        message = " ".join(str(e).split()) or "interrupted"
        print(f"tying {verb}: {message}", file=sys.stderr)
        return int(getattr(e, "exit_status", 130))
    except USER_ERRORS as e:
        if debug:
            raise
        return _fail(verb, cli_wording(str(e)), 2)
    except Exception as e:
        if debug:
            raise
        status = getattr(e, "exit_status", None)
        if isinstance(status, int):  # a failure the library explains itself (e.g. divergence)
            return _fail(verb, str(e), status)
        traceback.print_exc()
        return _fail(
            verb,
            f"{type(e).__name__}: {e} (an unexpected failure, not bad input: the traceback is "
            "above; please report it)",
            1,
        )


if __name__ == "__main__":
    sys.exit(main())
