"""lm-eval's own command line, with the "tying" model registered and our task folder included.

    python -m tying.evaluation.harness_cli --model tying --model_args spec=smollm2 \\
        --tasks tying_gsm8k --limit 10 --device cpu --batch_size 8

Every `lm_eval` option works as usual (`run`, `ls tasks`, `validate`, `--output_path`,
`--log_samples`, ...); `--include_path <tying/evaluation/lm_eval_tasks>` is added unless one is
given, and `--device auto` (CUDA if present, else the CPU) unless a device is given (lm-eval's
own default is cuda:0, which `tying.devices.resolve_device` refuses where there is no CUDA). The code tasks are marked unsafe (lm-eval asks for `--confirm_run_unsafe_code`); their
programs run only in `tying.evaluation.sandbox`. The stock
`lm_eval` command needs the model registered first (lm-eval 0.4 has no plugin discovery):
it works when the tasks are named by the paths of our YAML files, whose `!function` hooks
import `tying.evaluation.harness_tasks` (which imports `tying.evaluation.harness`) while lm-eval
resolves the tasks, before it builds the model:

    lm_eval --model tying --model_args spec=smollm2 --device cpu \\
        --tasks "$(python -c 'import tying.evaluation.harness_tasks as t; print(t.TASKS_DIR)')/tying_gsm8k.yaml"
"""

from __future__ import annotations

import sys


def _given(args: list[str], flag: str) -> bool:
    """Whether `flag` is among the command-line `args` (as `flag VALUE` or `flag=VALUE`)."""
    return any(a == flag or a.startswith(f"{flag}=") for a in args)


def main(argv: list[str] | None = None) -> None:
    """Run lm-eval's command line on `argv` (default: sys.argv[1:])."""
    from lm_eval.__main__ import cli_evaluate

    from tying.evaluation.harness_tasks import TASKS_DIR  # also registers the model "tying"

    args = list(sys.argv[1:] if argv is None else argv)
    if args and not _given(args, "--include_path"):
        args += ["--include_path", str(TASKS_DIR)]
    if _given(args, "--model") and not _given(args, "--device"):
        args += ["--device", "auto"]
    sys.argv = [sys.argv[0], *args]
    cli_evaluate()


if __name__ == "__main__":
    main()
