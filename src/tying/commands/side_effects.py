"""`tying side-effects BASE UPDATED --out DIR [--adapter DIR] [--tasks ...]`: what an update
changed besides its target (KL, loss, top-1 agreement, logit-lens profile, interface metrics,
cross-task change); DIR/side_effects.json (`--json` prints it)."""

from __future__ import annotations

import argparse

#: The figures of a text that the summary prints (side_effects.json holds the rest).
FIGURES = ("kl_nats", "delta_loss", "top1_agreement", "tokens")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.side_effects import SideEffectsOptions

    add_config_arguments(parser, SideEffectsOptions)


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.config_flags import config_from_args
    from tying.options.side_effects import SideEffectsOptions

    options = config_from_args(SideEffectsOptions, args)  # checked before torch loads
    from tying.evaluation.side_effects import run_side_effects

    result = run_side_effects(options)
    lines = [
        f"{name}: KL(base ‖ updated) {t['kl_nats']:.4g} nats/token, loss change "
        f"{t['delta_loss']:+.4f} nats/token, top-1 agreement {t['top1_agreement']:.1%} over "
        f"{t['tokens']:,} tokens"
        for name, t in result.report.get("texts", {}).items()
        if all(isinstance(t.get(k), (int, float)) for k in FIGURES)
    ]
    report(args, [*lines, f"wrote {result.json_path}"], None, result.json_path)
    return 0
