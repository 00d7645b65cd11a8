"""`tying experiment CONFIG.yaml [key=value ...]`: a grid of runs, then one report.

Runs every cell (finished ones skipped, killed ones resumed), probes and lenses them, and
writes OUT/report.json (`--json` prints it), report.md and report.html. Overrides: `key=value` for top-level keys
(`seeds=[0,1]`), `section.key=value` inside sections (`train.max_steps=50`,
`lens.kind=tuned`); flags likewise (`--seeds 0 1`, `--train.max_steps 50` is not a flag:
`train`, `scratch`, `teacher` and `variants` are free-form TrainConfig mappings).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.experiment import ExperimentConfig

    parser.add_argument("config", metavar="CONFIG.yaml", help="experiment config file")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="overrides: top-level keys, or section.key (train.lr=1e-3, lens.kind=tuned)",
    )
    add_config_arguments(parser, ExperimentConfig)
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--train-only", action="store_true", help="train the grid, skip the analysis and report"
    )
    parser.add_argument(
        "--updates-only",
        action="store_true",
        help="train the grid and run its update stage; write OUT/updates.json only (no probes, "
        "lenses or report)",
    )
    parser.add_argument(
        "--shard",
        metavar="I/N",
        help="with --updates-only: run only bases I, I+N, I+2N, ... of the update stage (N "
        "processes share it out; a last call without --shard writes OUT/updates.json)",
    )


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.config_flags import config_from_args, split_config_items
    from tying.errors import InvalidInputError
    from tying.options.experiment import ExperimentConfig, parse_shard

    path, overrides = split_config_items([args.config, *args.overrides])
    cfg = config_from_args(ExperimentConfig, args, path, overrides)  # checked before torch loads
    if args.train_only and args.updates_only:
        raise InvalidInputError("--train-only and --updates-only exclude each other: give one")
    shard = parse_shard(args.shard) if args.shard else None
    if shard is not None and not args.updates_only:
        raise InvalidInputError("--shard needs --updates-only")
    from tying.experiment import run_experiment, run_grid, run_updates_only

    if args.train_only:  # no file of its own: each run folder holds its results
        outcomes = run_grid(cfg, progress=not args.no_progress)
        runs = [
            {"name": o.spec.name, "run_dir": str(o.run_dir), "state": o.state, **o.result}
            for o in outcomes
        ]
        lines = [f"{r['name']}: {r['state']} -> {r['run_dir']}" for r in runs]
        report(args, [*lines, f"trained the grid of {len(runs)} run(s)"], {"runs": runs})
        return 0
    if args.updates_only:
        written = run_updates_only(cfg, progress=not args.no_progress, shard=shard)
        if written:
            report(args, [f"wrote {written}"], None, written)
        else:  # one shard of the stage: the last call (no --shard) writes updates.json
            done = f"update stage shard {args.shard} done"
            report(args, [done], {"shard": args.shard, "updates_json": None})
        return 0
    result = run_experiment(cfg, progress=not args.no_progress)
    line = f"wrote {result.json_path}, {result.markdown_path} and {result.html_path}"
    report(args, [line], None, result.json_path)
    return 0
