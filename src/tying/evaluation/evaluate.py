"""`tying evaluate`: a model (and optionally an adapter) on GSM8K, SVAMP, MBPP and HumanEval
through lm-evaluation-harness, with per-item correctness written to results.json.

    options = EvaluateOptions(spec="smollm2", tasks=("gsm8k", "mbpp"), out="runs/eval", limit=10)
    results = evaluate_model(options)          # also writes runs/eval/results.json

For each task, lm-eval's `simple_evaluate` runs our model ("tying", `TyingLM`) on our task
configs (`tying_<task>`: greedy generation, scored by exact match of the final number or by
pass@1 in the sandbox) and on their companions (`tying_<task>_ref`: the log-likelihood of the
reference answer or solution after the same prompt). With `limit`, both evaluate the same
fixed seeded subset of items (`tying.evaluation.tasks.seeded_subset`, given to lm-eval as
`samples`). From lm-eval's logged samples:

    accuracy                = mean over the n items of correct (exact match or pass@1)
    ci95                    = Wilson 95% interval of accuracy (`stats.wilson_interval`)
    ref_loglik_per_token    = sum_i log p(reference_i | prompt_i) / sum_i tokens_i   (nats/token)

where tokens_i is the number of tokens lm-eval scored for item i's reference (its own split of
prompt + reference into tokens). results.json:

    {"model": SPEC,
     "tasks": {TASK: {"accuracy", "ci95": [lo, hi], "n", "ref_loglik_per_token",
                      "items": [{"id", "correct", "ref_loglik", "ref_tokens", "completion"}, ...],
                      "metric", "accuracy_strict" (math), "ref_tokens", "total_items",
                      "truncated_prompts": {"generate", "reference"} (prompts cut from the left
                      to fit the model's context), "seconds", "seconds_per_item"}},
     "run": {adapter, options, lm-eval version, task config hashes, timings}}

Everything that can be checked is checked before the model runs (task names, limit, files,
tokenizer, adapter, a non-empty output folder); the output folder is written once, at the end,
whole (`tying.outputs.output_folder`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tying.devices import resolve_device, resolve_precision
from tying.errors import InvalidInputError
from tying.evaluation.stats import wilson_interval
from tying.evaluation.tasks import seeded_subset
from tying.options.evaluate import EvaluateOptions as EvaluateOptions
from tying.options.evaluate import parse_tasks as parse_tasks
from tying.outputs import check_output_folder, output_folder, write_text_atomic

#: File name of the results in the output folder.
RESULTS_FILE = "results.json"
#: Metric that decides an item's `correct`, by task.
METRICS = {
    "gsm8k": "exact_match",
    "svamp": "exact_match",
    "mbpp": "pass_at_1",
    "humaneval": "pass_at_1",
}

log = logging.getLogger(__name__)


def check_options(options: EvaluateOptions) -> tuple[str, ...]:
    """Validate the options that need no file or model; returns the task names.

    Raises:
        ValueError: what is wrong, in one line.
    """
    tasks = parse_tasks(options.tasks)
    if options.limit is not None and (isinstance(options.limit, bool) or int(options.limit) < 1):
        raise InvalidInputError(
            f"limit must be a positive number of items, got {options.limit}; omit it to "
            "evaluate every item"
        )
    if int(options.batch_size) < 1:
        raise InvalidInputError(f"batch size must be >= 1, got {options.batch_size}")
    if options.max_new_tokens is not None and int(options.max_new_tokens) < 1:
        raise InvalidInputError(f"max_new_tokens must be >= 1, got {options.max_new_tokens}")
    if options.num_fewshot is not None and int(options.num_fewshot) < 0:
        raise InvalidInputError(f"num_fewshot must be >= 0, got {options.num_fewshot}")
    if not (isinstance(options.code_timeout_s, (int, float)) and options.code_timeout_s > 0):
        raise InvalidInputError(
            f"code timeout must be a positive number of seconds, got {options.code_timeout_s!r}"
        )
    if not math.isfinite(float(options.code_timeout_s)):
        raise InvalidInputError(f"code timeout must be finite, got {options.code_timeout_s!r}")
    if not options.generate and not options.reference_loglik:
        raise InvalidInputError(
            "generate and reference_loglik are both off: nothing to evaluate; keep one of them"
        )
    out = Path(options.out).expanduser()
    if out.exists() and not out.is_dir():
        raise InvalidInputError(
            f"the output folder {out} is a file: give a folder for {RESULTS_FILE}"
        )
    check_output_folder(out, options.overwrite)
    return tasks


def subset_indices(task: str, limit: int | None, seed: int) -> tuple[list[int] | None, int]:
    """The document indices of a task's evaluated items, ascending (None: all), and the total.

    Reads the task's files (so a missing or malformed file fails here, before the model runs).
    """
    from tying.evaluation.harness_tasks import task_dataset

    docs = task_dataset(task)["test"]
    total = len(docs)
    if limit is None or limit >= total:
        return None, total
    items = [_Id(i) for i in docs["id"]]
    chosen = {item.id for item in seeded_subset(items, int(limit), seed)}
    return [i for i, item in enumerate(items) if item.id in chosen], total


@dataclass(frozen=True)
class _Id:
    id: str


def config_hashes() -> dict[str, str]:
    """sha256 of each of our lm-eval task files, by file name."""
    from tying.evaluation.harness_tasks import task_files

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in task_files().values()}


@contextmanager
def _quiet_lm_eval(level: int = logging.ERROR):
    """lm-eval logs every step, and warns about options we set on purpose (custom datasets,
    generation kwargs, truncation, which results.json counts): keep its errors only."""
    logger = logging.getLogger("lm_eval")
    previous = logger.level
    logger.setLevel(max(level, previous))
    try:
        yield
    finally:
        logger.setLevel(previous)


def quiet_git_commit_hash() -> str | None:
    """lm-eval's `get_git_commit_hash` (`git describe --always`, else the commit of a `.git`
    folder in the current directory) without git's own stderr: outside a repository lm-eval's
    version lets git print `fatal: not a git repository` on the terminal; here git's message
    goes to the log at debug level."""
    from lm_eval.loggers.utils import get_commit_from_path

    try:
        done = subprocess.run(
            ["git", "describe", "--always"],  # lm-eval's own probe
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:
        log.debug("no git commit for lm-eval's record: %s", e)
        return get_commit_from_path(os.getcwd())
    if done.returncode != 0:
        log.debug("no git commit for lm-eval's record: %s", done.stderr.strip())
        return get_commit_from_path(os.getcwd())
    return done.stdout.strip()


@contextmanager
def _quiet_git_probe():
    """lm-eval's `simple_evaluate` asks git for a commit hash: ask it quietly instead."""
    import lm_eval.evaluator

    probe = lm_eval.evaluator.get_git_commit_hash
    lm_eval.evaluator.get_git_commit_hash = quiet_git_commit_hash
    try:
        yield
    finally:
        lm_eval.evaluator.get_git_commit_hash = probe


def _run_lm_eval(
    lm: Any, task_name: str, indices: list[int] | None, options: EvaluateOptions
) -> tuple[list[dict], float]:
    """lm-eval's simple_evaluate on one of our tasks: its logged samples (by doc index) and the
    seconds it took."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from tying.evaluation.harness_tasks import TASKS_DIR

    manager = TaskManager(
        include_path=str(TASKS_DIR),
        include_defaults=False,
        metadata={"code_timeout_s": float(options.code_timeout_s)},
    )
    gen_kwargs = (
        {"max_gen_toks": int(options.max_new_tokens)}
        if options.max_new_tokens is not None
        else None
    )
    start = time.perf_counter()
    with _quiet_lm_eval(), _quiet_git_probe():
        output = simple_evaluate(
            model=lm,
            tasks=[task_name],
            samples={task_name: indices} if indices is not None else None,
            task_manager=manager,
            log_samples=True,
            bootstrap_iters=0,
            gen_kwargs=gen_kwargs,
            num_fewshot=options.num_fewshot,
            confirm_run_unsafe_code=True,  # programs run only in tying.evaluation.sandbox
        )
    seconds = time.perf_counter() - start
    samples = sorted(output["samples"][task_name], key=lambda s: s["doc_id"])
    return samples, seconds


def _pair_lengths(lm: Any, context: str, continuation: str) -> tuple[int, int]:
    """Token counts of the context and of the continuation lm-eval scores after it (its own
    split of context + continuation, `TemplateLM._encode_pair`)."""
    if not context:  # lm-eval then conditions on one prefix token
        return 1, len(lm.tok_encode(continuation, add_special_tokens=False))
    context_ids, continuation_ids = lm._encode_pair(context, continuation)
    return len(context_ids), len(continuation_ids)


def evaluate_task(
    lm: Any, task: str, indices: list[int] | None, options: EvaluateOptions
) -> dict[str, Any]:
    """Generation, scoring and (optionally) reference likelihood of one task; the results.json
    entry of the task."""
    from tying.evaluation.harness_tasks import generation_task, reference_task

    metric = METRICS[task]
    if options.generate:
        samples, gen_seconds = _run_lm_eval(lm, generation_task(task), indices, options)
    else:
        samples, gen_seconds = [], 0.0
    items = []
    truncated = {"generate": 0, "reference": 0}
    for s in samples:
        context, gen_kwargs = s["arguments"][0][:2]
        if len(lm.tok_encode(context)) > lm.max_length - int(
            gen_kwargs.get("max_gen_toks", lm.max_gen_toks)
        ):
            truncated["generate"] += 1
        filtered = s["filtered_resps"][0]
        completion = s["resps"][0][0]
        item = {"id": s["doc"]["id"], "correct": bool(s[metric] == 1.0), "completion": completion}
        if isinstance(filtered, dict):  # code tasks: the sandbox's verdict
            item.update(code=filtered["code"], timed_out=filtered["timed_out"])
        elif "exact_match_strict" in s:
            item["correct_strict"] = bool(s["exact_match_strict"] == 1.0)
        items.append(item)
    seconds = {"generate": gen_seconds}
    if options.reference_loglik:
        ref_samples, seconds["reference"] = _run_lm_eval(lm, reference_task(task), indices, options)
        by_id = {s["doc"]["id"]: s for s in ref_samples}
        if not options.generate:  # likelihood only: the items are the references'
            items = [{"id": s["doc"]["id"]} for s in ref_samples]
    n = len(items)
    entry: dict[str, Any] = {
        "accuracy": None,
        "ci95": None,
        "n": n,
        "ref_loglik_per_token": None,
        "metric": metric,
        "lm_eval_task": generation_task(task),
    }
    if options.generate:
        correct = sum(item["correct"] for item in items)
        entry["accuracy"] = correct / n
        entry["ci95"] = list(wilson_interval(correct, n))
        if metric == "exact_match":
            entry["accuracy_strict"] = sum(i["correct_strict"] for i in items) / n
    if options.reference_loglik:
        total_ll, total_tokens = 0.0, 0
        for item in items:
            ref = by_id[item["id"]]
            context, continuation = ref["arguments"][0][:2]
            n_context, tokens = _pair_lengths(lm, context, continuation)
            if n_context + tokens > lm.max_length + 1:
                truncated["reference"] += 1
            item["ref_loglik"] = float(ref["ref_loglik"])
            item["ref_tokens"] = tokens
            total_ll += item["ref_loglik"]
            total_tokens += tokens
        entry["ref_loglik_per_token"] = total_ll / total_tokens
        entry["ref_tokens"] = total_tokens
    entry["truncated_prompts"] = truncated
    entry["seconds"] = seconds
    entry["seconds_per_item"] = sum(seconds.values()) / n
    entry["items"] = items
    return entry


def write_results(results: dict[str, Any], out: str | Path) -> Path:
    """Write `results` to out/results.json atomically (a temporary file, then a rename)."""
    folder = Path(out).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(folder / RESULTS_FILE, json.dumps(results, indent=2) + "\n")


def evaluate_model(options: EvaluateOptions, lm: Any = None) -> dict[str, Any]:
    """Evaluate a model on the tasks of `options` and write out/results.json.

    Args:
        options: see `EvaluateOptions`.
        lm: an already built `tying.evaluation.harness.TyingLM` to evaluate instead of loading
            `options.spec` (its spec, adapter, dtype and device are then the model's own).

    Returns:
        The results written to results.json (see the module docstring).

    Raises:
        ValueError: unknown task, limit < 1, a malformed task file, a model without tokenizer,
            an adapter for another base model, other bad options.
        FileNotFoundError: a missing task file, model or adapter folder.
    """
    import lm_eval

    started = time.time()
    tasks = check_options(options)
    subsets = {task: subset_indices(task, options.limit, options.seed) for task in tasks}
    if lm is None:
        from tying.evaluation.harness import TyingLM

        # The verb's one resolution of its device and precision; TyingLM takes them as they are.
        device = resolve_device(options.device)
        precision = resolve_precision(options.precision, device)
        lm = TyingLM(
            spec=options.spec,
            adapter=options.adapter,
            dtype=options.dtype,
            device=device,
            batch_size=int(options.batch_size),
            mixed_precision_dtype="bfloat16" if precision == "bf16" else None,
        )
    results: dict[str, Any] = {"model": options.spec, "tasks": {}}
    for task in tasks:
        indices, total = subsets[task]
        entry = evaluate_task(lm, task, indices, options)
        entry["total_items"] = total
        results["tasks"][task] = entry
    import tying

    results["run"] = {
        "name": lm.loaded.name,
        "adapter": lm.loaded.adapter,
        "options": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in dataclasses.asdict(options).items()
        },
        "lm_eval_version": lm_eval.__version__,
        "tying_version": getattr(tying, "__version__", None),
        "task_configs": config_hashes(),
        "model_info": {
            k: v if isinstance(v, (str, int, float, bool, type(None))) else str(v)
            for k, v in lm.get_model_info().items()
        },
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "seconds": time.time() - started,
    }
    results["run"]["options"]["tasks"] = list(tasks)
    results["run"]["precision"] = (
        "bf16" if getattr(lm, "mixed_precision_dtype", None) == torch.bfloat16 else "fp32"
    )
    with output_folder(options.out, overwrite=options.overwrite) as tmp:
        write_results(results, tmp)
    return results
