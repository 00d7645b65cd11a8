"""`tying finetune SPEC --task mbpp|gsm8k|FILE.jsonl --out DIR [--max-steps N]`: a LoRA update;
DIR holds the adapter (peft's files and tying_adapter.json), metrics.jsonl and finetune.json."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.finetune import FinetuneOptions

    add_config_arguments(parser, FinetuneOptions)


def run(args: argparse.Namespace) -> int:
    from tying.config_flags import config_from_args
    from tying.options.finetune import FinetuneOptions

    options = config_from_args(FinetuneOptions, args)  # checked before torch loads
    from tying.update import finetune

    result = finetune(options)
    per_step = result.seconds_per_step
    print(
        f"wrote the adapter to {result.out} ({result.steps} steps, final loss "
        f"{result.final_loss:.4f} nats/token"
        + (f", {per_step:.2f} s/step)" if per_step is not None else ")")
    )
    return 0
