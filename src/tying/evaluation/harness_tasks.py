"""Hooks of our lm-eval task configs (`lm_eval_tasks/*.yaml`): local datasets and scoring.

Four generation tasks and their reference-likelihood companions:

| lm-eval task | generation | scored by |
|---|---|---|
| `tying_gsm8k` | 5-shot (GSM8K train, lm-eval's gsm8k format), greedy, until "Question:" | `score_math`: exact match of the final number |
| `tying_svamp` | the same 5-shot GSM8K examples, then the SVAMP question | `score_math` |
| `tying_mbpp` | 3-shot prompt (tasks 2-4, lm-eval's mbpp format), until "[DONE]" | `run_programs` + `score_code`: pass@1 |
| `tying_humaneval` | 0-shot function header, lm-eval's humaneval stops | `run_programs` + `score_code`: pass@1 |
| `tying_<task>_ref` | the same prompt, scoring the reference (`TaskItem.target`) | `score_ref`: its log-likelihood |

The datasets are the `tying.evaluation.tasks` items read from the local files at run time
(`tying.paths`), never a path written in YAML, and never the Hugging Face Hub. Each document
carries the item's fields (id, task, prompt, reference, target, answer, tests) and the
time limit of its programs (`code_timeout_s`, from lm-eval's task metadata: `TaskManager(
metadata={"code_timeout_s": ...})` or `lm_eval --metadata '{"code_timeout_s": 10}'`).

Model-written code is executed only through `tying.evaluation.sandbox.run_program`.

Importing this module also imports `tying.evaluation.harness`, which registers the lm-eval model
"tying": lm-eval resolves these hooks when it reads a task given by its YAML path, so then the
stock `lm_eval --model tying` finds the model.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tying.errors import InvalidInputError
from tying.evaluation.answers import answers_match, extract_code, extract_number
from tying.evaluation.sandbox import run_program
from tying.evaluation.tasks import FILES, TASKS, TaskItem, load_task, program_for
from tying.paths import bench_dir

#: The folder of the task configs (give it to lm-eval as `--include_path`).
TASKS_DIR = Path(__file__).parent / "lm_eval_tasks"
#: Seconds each model-written program may run (interpreter start included).
DEFAULT_CODE_TIMEOUT_S = 10.0
#: Programs run at once by `run_programs` (each in its own sandboxed process).
CODE_WORKERS = max(1, min(4, os.cpu_count() or 1))
#: The tasks scored by running code.
CODE_TASKS = ("mbpp", "humaneval")


def generation_task(task: str) -> str:
    """The lm-eval name of a task's generation config: "gsm8k" -> "tying_gsm8k"."""
    return f"tying_{task}"


def reference_task(task: str) -> str:
    """The lm-eval name of a task's reference-likelihood config: "gsm8k" -> "tying_gsm8k_ref"."""
    return f"tying_{task}_ref"


def task_files() -> dict[str, Path]:
    """The YAML file of every lm-eval task here, by lm-eval task name."""
    return {path.stem: path for path in sorted(TASKS_DIR.glob("*.yaml"))}


# --- datasets --------------------------------------------------------------------------------


def document(item: TaskItem, code_timeout_s: float) -> dict[str, Any]:
    """An lm-eval document of a `TaskItem`: its fields (not `meta`) as strings, and the time
    limit of its programs."""
    return {
        "id": item.id,
        "task": item.task,
        "prompt": item.prompt,
        "reference": item.reference,
        "target": item.target,
        "answer": item.answer,
        "tests": item.tests,
        "code_timeout_s": float(code_timeout_s),
    }


def item_of(doc: dict[str, Any]) -> TaskItem:
    """The `TaskItem` a document was made from (without `meta`)."""
    return TaskItem(
        id=doc["id"],
        task=doc["task"],
        prompt=doc["prompt"],
        reference=doc["reference"],
        answer=doc["answer"],
        tests=doc["tests"],
    )


def _timeout(metadata: dict[str, Any]) -> float:
    value = metadata.get("code_timeout_s", DEFAULT_CODE_TIMEOUT_S)
    try:
        timeout = float(value)
    except (TypeError, ValueError):
        timeout = float("nan")
    if not timeout > 0:
        raise InvalidInputError(
            f"code_timeout_s must be a positive number of seconds, got {value!r}"
        )
    return timeout


#: The splits each task's dataset holds: lm-eval split name -> (task, split) it is read from.
SPLITS: dict[str, dict[str, tuple[str, str]]] = {
    # "train": few-shot examples (lm-eval's fewshot_split)
    "gsm8k": {"test": ("gsm8k", "test"), "train": ("gsm8k", "train")},
    # SVAMP has no training split: GSM8K's examples, in the same answer format
    "svamp": {"test": ("svamp", "test"), "train": ("gsm8k", "train")},
    "mbpp": {"test": ("mbpp", "test")},  # the 3 fixed examples are inside each prompt
    "humaneval": {"test": ("humaneval", "test")},
}
assert set(SPLITS) == set(TASKS)


def _files_key(task: str) -> tuple:
    """(path, size, mtime) of every file a task's dataset reads: a changed file is re-read."""
    root = bench_dir()
    key = []
    for name, split in SPLITS[task].values():
        path = root / FILES[name][split]
        stat = path.stat() if path.is_file() else None
        key.append((str(path), stat and stat.st_size, stat and stat.st_mtime_ns))
    return tuple(key)


@functools.lru_cache(maxsize=8)
def _cached_dataset(task: str, timeout: float, files_key: tuple) -> Any:
    import datasets

    return datasets.DatasetDict(
        {
            split: datasets.Dataset.from_list(
                [document(item, timeout) for item in load_task(name, source_split)]
            )
            for split, (name, source_split) in SPLITS[task].items()
        }
    )


def task_dataset(task: str, code_timeout_s: float = DEFAULT_CODE_TIMEOUT_S) -> Any:
    """The `datasets.DatasetDict` of a task's documents, one split per entry of `SPLITS[task]`
    (read once per process while the files are unchanged).

    Raises:
        ValueError: unknown task, a malformed file or a bad time limit.
        FileNotFoundError: a missing file.
    """
    if task not in SPLITS:
        raise InvalidInputError(f"unknown task {task!r}: choose one of {', '.join(TASKS)}")
    timeout = _timeout({"code_timeout_s": code_timeout_s})
    return _cached_dataset(task, timeout, _files_key(task))


def gsm8k_dataset(**metadata: Any) -> Any:
    """lm-eval custom_dataset of tying_gsm8k: "test" (1,319 items) and "train" (7,473)."""
    return task_dataset("gsm8k", _timeout(metadata))


def svamp_dataset(**metadata: Any) -> Any:
    """lm-eval custom_dataset of tying_svamp: "test" (1,000) and GSM8K's "train" as examples."""
    return task_dataset("svamp", _timeout(metadata))


def mbpp_dataset(**metadata: Any) -> Any:
    """lm-eval custom_dataset of tying_mbpp: "test" (task_ids 11-510, 3-shot prompts)."""
    return task_dataset("mbpp", _timeout(metadata))


def humaneval_dataset(**metadata: Any) -> Any:
    """lm-eval custom_dataset of tying_humaneval: "test" (164 function headers)."""
    return task_dataset("humaneval", _timeout(metadata))


# --- scoring ---------------------------------------------------------------------------------


def score_math(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """GSM8K/SVAMP: 1.0 when the generation's final number equals the answer, else 0.0.

    "exact_match": the last number in the generation (lm-eval gsm8k's "flexible-extract");
    "exact_match_strict": the number after the first "#### " ("strict-match"). Numbers are
    compared as exact decimals (`tying.evaluation.answers`).
    """
    text = results[0]
    return {
        "exact_match": float(answers_match(extract_number(text), doc["answer"])),
        "exact_match_strict": float(
            answers_match(extract_number(text, strict=True), doc["answer"])
        ),
    }


def run_program_of(doc: dict[str, Any], generation: str) -> dict[str, Any]:
    """Cut the code out of a generation, join it with the item's tests and run it in the sandbox.

    Returns:
        {"passed", "timed_out", "code", "stderr"}: the sandbox's verdict, the extracted code and
        the tail of its error output.
    """
    item = item_of(doc)
    code = extract_code(generation, continuation=item.task == "humaneval")
    result = run_program(program_for(item, code), float(doc["code_timeout_s"]))
    return {
        "passed": bool(result.passed),
        "timed_out": bool(result.timed_out),
        "code": code,
        "stderr": result.stderr[-500:],
    }


def run_programs(resps: list[list[str]], docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """lm-eval custom filter of the code tasks: every first generation run against its tests
    (`run_program_of`), `CODE_WORKERS` sandboxed programs at a time."""
    with ThreadPoolExecutor(max_workers=CODE_WORKERS) as pool:
        return list(pool.map(lambda r, d: run_program_of(d, r[0]), resps, docs))


def score_code(doc: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, float]:
    """MBPP/HumanEval: pass@1 of the greedy completion (1.0 when its program passed)."""
    return {"pass_at_1": float(results[0]["passed"])}


def score_ref(doc: dict[str, Any], results: list[tuple[float, bool]]) -> dict[str, float]:
    """Companion tasks: the log-likelihood (nats, summed over its tokens) of the reference
    continuation `target` given the prompt."""
    return {"ref_loglik": float(results[0][0])}


import tying.evaluation.harness  # noqa: E402, F401  (registers the lm-eval model "tying")
