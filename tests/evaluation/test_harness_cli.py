"""lm-eval's own command line runs our model and tasks: through `python -m
tying.evaluation.harness_cli` (task names, our folder included), and through the stock `lm_eval`
command when the tasks are given by their YAML paths (slow: a fresh interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tying.evaluation.harness_cli import main
from tying.evaluation.harness_tasks import TASKS_DIR, task_files

from ._harness_models import eval_model_dir  # noqa: F401


def read_results(out: Path) -> dict:
    files = sorted(out.rglob("results_*.json"))
    assert files, f"lm-eval wrote no results under {out}"
    return json.loads(files[-1].read_text())


def test_task_folder_holds_every_task() -> None:
    assert set(task_files()) == {
        f"tying_{t}{suffix}"
        for t in ("gsm8k", "svamp", "mbpp", "humaneval")
        for suffix in ("", "_ref")
    }


def test_lm_eval_command_line_with_task_names(
    eval_model_dir: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch,
) -> None:
    monkeypatch.setattr(sys, "argv", ["lm_eval"])
    main(
        [
            "--model",
            "tying",
            "--model_args",
            f"spec={eval_model_dir}",
            "--tasks",
            "tying_svamp,tying_humaneval_ref",
            "--limit",
            "2",
            "--device",
            "cpu",
            "--gen_kwargs",
            "max_gen_toks=4",
            "--confirm_run_unsafe_code",
            "--output_path",
            str(tmp_path / "out"),
        ]
    )
    results = read_results(tmp_path / "out")["results"]
    assert results["tying_svamp"]["exact_match,none"] == 0.0  # a random model
    assert results["tying_humaneval_ref"]["ref_loglik,none"] < 0.0


@pytest.mark.slow
def test_stock_lm_eval_with_task_paths(
    eval_model_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    lm_eval = Path(sys.executable).parent / "lm_eval"
    if not lm_eval.is_file():
        pytest.skip("the lm_eval command is not installed next to this Python")
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    run = subprocess.run(
        [
            str(lm_eval),
            "--model",
            "tying",
            "--model_args",
            f"spec={eval_model_dir}",
            "--tasks",
            str(TASKS_DIR / "tying_gsm8k.yaml"),
            "--limit",
            "1",
            "--device",
            "cpu",
            "--gen_kwargs",
            "max_gen_toks=2",
            "--output_path",
            str(tmp_path / "out"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "tying_gsm8k" in read_results(tmp_path / "out")["results"]
