"""`tying export RUN_OR_DIR OUT`: write a plain transformers checkpoint of a converted model."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.convert import ExportOptions

    add_config_arguments(parser, ExportOptions)


def run(args: argparse.Namespace) -> int:
    from tying.config_flags import config_from_args
    from tying.options.convert import ExportOptions

    options = config_from_args(ExportOptions, args)  # checked before torch loads
    from tying.teacher.conversion import export_to_folder

    print(json.dumps(export_to_folder(options), indent=2))
    return 0
