"""`tying train [CONFIG.yaml] [key=value ...]`: train a model (scratch or teacher mode)."""

from __future__ import annotations

import argparse
import json

HELP = "train a decoder (scratch) or a converted HF model (teacher); see TrainConfig for keys"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "items",
        nargs="*",
        metavar="CONFIG.yaml | key=value",
        help="an optional YAML file first, then key=value overrides (e.g. tie=pit max_steps=200)",
    )


def split_items(items: list[str]) -> tuple[str | None, list[str]]:
    """(config file or None, overrides) from the positional arguments."""
    path = None
    if items and "=" not in items[0]:
        path, items = items[0], items[1:]
    bad = [i for i in items if "=" not in i]
    if bad:
        raise SystemExit(f"tying train: expected key=value, got {bad[0]!r}")
    return path, items


def run(args: argparse.Namespace) -> int:
    from tying.config import load_config
    from tying.train.config import TrainConfig
    from tying.train.loop import train

    path, overrides = split_items(args.items)
    cfg = load_config(TrainConfig, path, overrides)
    result = train(cfg)
    summary = {
        "run_dir": str(result.run_dir),
        "steps": result.steps,
        "tokens": result.tokens,
        "final_loss": result.final_loss,
        "val_loss": result.val_loss,
        "elapsed_s": round(result.elapsed_s, 2),
    }
    print(json.dumps(summary, indent=2))
    return 0
