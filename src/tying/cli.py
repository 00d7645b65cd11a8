"""`tying <verb>`: one verb per capability.

Each verb lives in its own module, imported only when that verb runs, so
`tying --help` stays fast. A verb module provides:

    HELP: str                                   one line for `tying --help`
    add_arguments(parser: argparse.ArgumentParser) -> None
    run(args: argparse.Namespace) -> int        the exit status
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# verb -> module path. Add one line here per new verb.
VERBS: dict[str, str] = {
    "info": "tying.commands.info",
    "train": "tying.commands.train",
    "eval": "tying.commands.eval",
    "tokenize": "tying.commands.tokenize",
    "params": "tying.commands.params",
    "convert": "tying.commands.convert",
    "export": "tying.commands.export",
    "lens": "tying.commands.lens",
    "trace": "tying.commands.trace",
    "plot": "tying.commands.plot",
    "probe": "tying.commands.probe",
    "experiment": "tying.commands.experiment",
    "demo": "tying.commands.demo",
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one sub-parser per verb (verb modules imported lazily)."""
    from tying import __version__

    parser = argparse.ArgumentParser(
        prog="tying",
        description="The token interface of language models: build, train, measure.",
    )
    parser.add_argument("--version", action="version", version=f"tying {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, module_path in VERBS.items():
        module = importlib.import_module(module_path)
        verb_parser = sub.add_parser(verb, help=module.HELP, description=module.HELP)
        module.add_arguments(verb_parser)
        verb_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `tying` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 0
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
