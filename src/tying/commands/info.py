"""`tying info [--json]`: versions and what this installation can do (no file written)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options of its own (`--json` is every verb's)."""


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.info import environment_info

    info = environment_info()
    report(args, [f"{key:>15}: {value}" for key, value in info.items()], info)
    return 0
