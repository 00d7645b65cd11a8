"""`tying evaluate SPEC [--adapter DIR] --tasks gsm8k,svamp,mbpp,humaneval --out DIR [--limit N]`:
GSM8K, SVAMP, MBPP and HumanEval through lm-evaluation-harness; DIR/results.json (`--json`
prints it)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.evaluate import EvaluateOptions

    add_config_arguments(parser, EvaluateOptions)


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.config_flags import config_from_args
    from tying.options.evaluate import EvaluateOptions

    options = config_from_args(EvaluateOptions, args)  # checked before torch loads
    from tying.evaluation.evaluate import RESULTS_FILE, evaluate_model

    results = evaluate_model(options)
    lines = []
    for task, entry in results["tasks"].items():
        lo, hi = entry["ci95"]
        loglik = entry["ref_loglik_per_token"]
        lines.append(
            f"{task}: accuracy {entry['accuracy']:.3f} [{lo:.3f}, {hi:.3f}] (n = {entry['n']})"
            + (f", reference log-likelihood {loglik:.4f} nats/token" if loglik is not None else "")
        )
    lines.append(f"wrote {options.out}/{RESULTS_FILE}")
    report(args, lines, None, f"{options.out}/{RESULTS_FILE}")
    return 0
