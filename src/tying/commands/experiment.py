"""`tying experiment CONFIG.yaml [key=value ...]`: a grid tie × mode × seed, then one report.

Runs every cell (finished ones skipped, killed ones resumed), probes and lenses them, and
writes OUT_DIR/report.json, report.md and report.html. Overrides: `key=value` for top-level
keys (`seeds=[0,1]`), `section.key=value` inside train/scratch/teacher/lens/analysis
(`train.max_steps=50`).
"""

from __future__ import annotations

import argparse
import sys

HELP = "train a grid (tie x mode x seed) at one token budget and write a side-by-side report"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", metavar="CONFIG.yaml", help="experiment config file")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="overrides: top-level keys, or section.key (train.lr=1e-3, lens.kind=tuned)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--train-only", action="store_true", help="train the grid, skip the analysis and report"
    )


def run(args: argparse.Namespace) -> int:
    from tying.config import ConfigError
    from tying.experiment import load_experiment, run_experiment, run_grid

    try:
        cfg = load_experiment(args.config, args.overrides)
    except (FileNotFoundError, ConfigError) as e:
        print(f"tying experiment: error: {e}", file=sys.stderr)
        return 2
    if args.train_only:
        run_grid(cfg, progress=not args.no_progress)
        return 0
    run_experiment(cfg, progress=not args.no_progress)
    return 0
