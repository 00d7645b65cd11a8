"""`tying train [CONFIG.yaml] [key=value ...] [--key value ...]`: train a model.

Settings: the defaults of `tying.train.TrainConfig`, then the YAML file, then `key=value`
overrides, then `--key value` flags (`tying train --help` lists every key).
Prints a short summary; writes the run's summary into RUN/train.json (`--json` prints it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

#: The run's summary (`TrainResult.summary`), written into the run folder; `--json` prints it.
SUMMARY_FILE = "train.json"


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
    from tying.commands import report, warn_contradictions
    from tying.config_flags import config_from_args, split_config_items
    from tying.options.train import TrainConfig

    path, overrides = split_config_items(args.items)
    cfg = config_from_args(TrainConfig, args, path, overrides)  # checked before torch loads
    warn_contradictions(cfg, "train")
    from tying.train import train

    summary = train(cfg).summary()
    loss = summary["final_loss"]
    val = summary["val_loss"]
    lines = [
        f"trained {summary['steps']} steps, {summary['tokens']:,} tokens in "
        f"{summary['elapsed_s']:.1f} s: final loss "
        + (f"{loss:.4f}" if loss is not None else "not finite")
        + " nats/token"
        + (f", validation loss {val:.4f} nats/token" if isinstance(val, (int, float)) else ""),
        f"run folder: {summary['run_dir']}",
    ]
    report(args, lines, summary, Path(summary["run_dir"]) / SUMMARY_FILE)
    return 0
