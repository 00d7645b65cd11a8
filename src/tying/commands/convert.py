"""`tying convert SPEC OUT --tie pit|tt|untied`: convert a Hugging Face causal LM and save it."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config import add_config_arguments
    from tying.teacher.conversion import ConvertOptions

    add_config_arguments(parser, ConvertOptions)


def run(args: argparse.Namespace) -> int:
    from tying.config import config_from_args
    from tying.teacher.conversion import ConvertOptions, convert_to_folder

    print(json.dumps(convert_to_folder(config_from_args(ConvertOptions, args)), indent=2))
    return 0
