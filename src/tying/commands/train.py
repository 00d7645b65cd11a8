"""`tying train [CONFIG.yaml] [key=value ...] [--key value ...]`: train a model.

Settings: the defaults of `tying.train.TrainConfig`, then the YAML file, then `key=value`
overrides, then `--key value` flags (`tying train --help` lists every key).
"""

from __future__ import annotations

import argparse
import json
import logging


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.train import TrainConfig

    parser.add_argument(
        "items",
        nargs="*",
        metavar="CONFIG.yaml | key=value",
        help="an optional YAML file first, then key=value overrides (e.g. tie=pit max_steps=200)",
    )
    add_config_arguments(parser, TrainConfig)


def run(args: argparse.Namespace) -> int:
    from tying.config_flags import config_from_args, split_config_items
    from tying.options.train import TrainConfig, contradictions

    path, overrides = split_config_items(args.items)
    cfg = config_from_args(TrainConfig, args, path, overrides)  # checked before torch loads
    for warning in contradictions(cfg):
        logging.getLogger("tying.train").warning(warning)
    from tying.train import train

    result = train(cfg)
    print(json.dumps(result.summary(), indent=2))
    return 0
