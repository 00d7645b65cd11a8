"""`tying export RUN_OR_DIR OUT`: write a plain transformers checkpoint of a converted model."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config import add_config_arguments
    from tying.teacher.conversion import ExportOptions

    add_config_arguments(parser, ExportOptions)


def run(args: argparse.Namespace) -> int:
    from tying.config import config_from_args
    from tying.teacher.conversion import ExportOptions, export_to_folder

    print(json.dumps(export_to_folder(config_from_args(ExportOptions, args)), indent=2))
    return 0
