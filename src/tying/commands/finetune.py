"""`tying finetune SPEC --task mbpp|gsm8k|FILE.jsonl --out DIR [--max-steps N]`: a LoRA update;
DIR holds the adapter (peft's files and tying_adapter.json), metrics.jsonl and finetune.json
(`--json` prints finetune.json)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.finetune import FinetuneOptions

    add_config_arguments(parser, FinetuneOptions)


def run(args: argparse.Namespace) -> int:
    from tying.commands import report, warn_contradictions
    from tying.config_flags import config_from_args
    from tying.options.finetune import FinetuneOptions

    options = config_from_args(FinetuneOptions, args)  # checked before torch loads
    warn_contradictions(options, "finetune")
    from tying.update import finetune
    from tying.update.finetune import SUMMARY_FILE

    result = finetune(options)
    per_step = result.seconds_per_step
    line = (
        f"wrote the adapter to {result.out} ({result.steps} steps, final loss "
        f"{result.final_loss:.4f} nats/token"
        + (f", {per_step:.2f} s/step)" if per_step is not None else ")")
    )
    report(args, [line], None, result.out / SUMMARY_FILE)
    return 0
