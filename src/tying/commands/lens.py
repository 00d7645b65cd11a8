"""`tying lens SPEC [SPEC ...] --kind logit|tuned|both --out DIR`: KL(final ‖ lens) per layer, in
DIR/lens.json (`--json` prints it) and DIR/lens.png."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.lens import LensOptions

    add_config_arguments(parser, LensOptions)


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.config_flags import config_from_args
    from tying.options.lens import LensOptions

    options = config_from_args(LensOptions, args)  # checked before torch loads
    from tying.lens.pipeline import run_lens

    result = run_lens(options)
    line = f"wrote {result.json_path} and {result.plot_path} ({result.device}, {result.precision})"
    report(args, [line], None, result.json_path)
    return 0
