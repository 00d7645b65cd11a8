"""`tying convert SPEC OUT --tie pit|tt|untied`: convert a Hugging Face causal LM and save it."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.convert import TRAINING_ONLY_KEYS, ConvertOptions

    add_config_arguments(parser, ConvertOptions, exclude=TRAINING_ONLY_KEYS)


def run(args: argparse.Namespace) -> int:
    from tying.config_flags import config_from_args
    from tying.options.convert import ConvertOptions

    options = config_from_args(ConvertOptions, args)  # checked before torch loads
    from tying.teacher.conversion import convert_to_folder

    result = convert_to_folder(options)
    step0 = result["report"].get("step0")
    if step0:
        print(
            f"step 0: KL(teacher ‖ converted) = {step0['kl']:.3f} nats/token, loss "
            f"{step0['loss']:.3f} (teacher {step0['teacher_loss']:.3f}) on {step0['tokens']} "
            "held-out tokens",
            file=sys.stderr,
        )
    print(json.dumps(result, indent=2))
    return 0
