"""`tying convert SPEC --out DIR --tie pit|tt|untied`: convert a Hugging Face causal LM and save
it; DIR/convert.json holds the conversion report (`--json` prints it)."""

from __future__ import annotations

import argparse
from pathlib import Path

#: The conversion result ({"out", "report"}), written into the output folder.
RESULT_FILE = "convert.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.convert import TRAINING_ONLY_KEYS, ConvertOptions

    add_config_arguments(parser, ConvertOptions, exclude=TRAINING_ONLY_KEYS)


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.config_flags import config_from_args
    from tying.options.convert import ConvertOptions

    options = config_from_args(ConvertOptions, args)  # checked before torch loads
    from tying.teacher.conversion import convert_to_folder

    result = convert_to_folder(options)
    r = result["report"]
    lines = [
        f"converted {options.spec} ({r['family']}, V={r['vocab_rows']:,}, d={r['d_model']}) to "
        f"a {r['tie']} interface in {result['out']}"
    ]
    step0 = r.get("step0")
    if step0:
        lines.append(
            f"step 0: KL(teacher ‖ converted) = {step0['kl']:.3f} nats/token, loss "
            f"{step0['loss']:.3f} (teacher {step0['teacher_loss']:.3f}) on {step0['tokens']} "
            "held-out tokens"
        )
    report(args, lines, result, Path(result["out"]) / RESULT_FILE)
    return 0
