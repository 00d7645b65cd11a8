"""Benchmark readers: real-file counts and references, templates, errors, seeded subsets."""

from __future__ import annotations

import gzip
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tying.evaluation.answers import extract_number
from tying.evaluation.sandbox import run_program
from tying.evaluation.tasks import (
    MBPP_SPLIT_IDS,
    SPLITS,
    TASKS,
    TaskItem,
    load_task,
    program_for,
    seeded_subset,
)
from tying.paths import bench_dir


@pytest.fixture(scope="module")
def bench():
    if not bench_dir().is_dir():
        pytest.skip(f"benchmark files not found at {bench_dir()} (set TYING_BENCH_DIR)")
    return bench_dir()


# --- the real files ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "split", "count"),
    [
        ("gsm8k", "train", 7473),
        ("gsm8k", "test", 1319),
        ("svamp", "test", 1000),
        ("mbpp", "prompt", 10),
        ("mbpp", "test", 500),
        ("mbpp", "validation", 90),
        ("mbpp", "train", 374),
        ("humaneval", "test", 164),
    ],
)
def test_counts_per_split(bench, task, split, count):
    items = load_task(task, split)
    assert len(items) == count
    assert len({item.id for item in items}) == count
    assert all(item.task == task and item.meta["split"] == split for item in items)


def test_mbpp_splits_follow_task_id_ranges(bench):
    seen = []
    for split, (low, high) in MBPP_SPLIT_IDS.items():
        ids = [item.meta["task_id"] for item in load_task("mbpp", split)]
        assert ids == list(range(low, high + 1))
        seen += ids
    assert sorted(seen) == list(range(1, 975))


def test_gsm8k_references_parse(bench):
    for split in SPLITS["gsm8k"]:
        for item in load_task("gsm8k", split):
            assert item.answer is not None
            assert item.reference.rstrip().endswith(item.meta["answer"].split("####")[-1].strip())
            # The flexible extraction of the reference solution finds its own final number.
            assert extract_number(item.reference) == item.answer


def test_math_prompts_and_targets(bench):
    first = load_task("gsm8k")[0]
    question = first.meta["question"]
    assert first.prompt == "Question: " + question + "\nAnswer:"
    assert first.target == " " + first.meta["answer"]
    assert first.answer == "18"
    svamp = load_task("svamp")[0]
    assert svamp.id == "svamp/chal-1"
    assert svamp.prompt == (
        "Question: Each pack of dvds costs 76 dollars. If there is a discount of 25 dollars on "
        "each pack How much do you have to pay to buy each pack?\nAnswer:"
    )
    assert (svamp.reference, svamp.answer, svamp.target) == ("51", "51", " 51")


def test_mbpp_prompt_is_lm_eval_three_shot(bench):
    items = {item.meta["task_id"]: item for item in load_task("mbpp", "test")}
    item = items[11]
    shots = {i.meta["task_id"]: i.meta for i in load_task("mbpp", "prompt")}
    zero = load_task("mbpp", "test", num_fewshot=0)[0]
    expected_zero = (
        "You are an expert Python programmer, and here is your task: "
        "Write a python function to remove first and last occurrence of a given character from "
        "the string. Your code should pass these tests:\n\n"
        'assert remove_Occ("hello","l") == "heo"\n'
        'assert remove_Occ("abcda","a") == "bcd"\n'
        'assert remove_Occ("PHP","P") == "H"\n[BEGIN]\n'
    )
    assert zero.prompt == expected_zero
    parts = item.prompt.split("\n[DONE]\n\n")
    assert len(parts) == 4 and parts[-1] == expected_zero
    for part, task_id in zip(parts, (2, 3, 4)):
        assert part.endswith("[BEGIN]\n" + shots[task_id]["code"])
        assert shots[task_id]["text"] in part
    assert item.reference == item.meta["code"]
    assert item.tests == "\n".join(item.meta["test_list"])


def test_humaneval_items(bench):
    item = load_task("humaneval")[0]
    assert item.id == "HumanEval/0"
    assert item.prompt == item.meta["prompt"]
    assert item.tests == item.meta["test"] + "\ncheck(has_close_elements)"
    assert program_for(item, "    pass\n") == item.prompt + "    pass\n" + "\n" + item.tests


def _check_references(items: list[TaskItem]) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda i: run_program(program_for(i, i.reference), 20), items))
    failed = [
        (item.id, result.stderr[-300:]) for item, result in zip(items, results) if not result.passed
    ]
    assert failed == []


def test_some_reference_solutions_pass_and_wrong_ones_fail(bench):
    humaneval = load_task("humaneval")
    mbpp = {item.meta["task_id"]: item for item in load_task("mbpp", "test")}
    chosen = [humaneval[0], humaneval[53], mbpp[11], mbpp[367]]  # 367 has test_setup_code
    assert mbpp[367].meta["test_setup_code"] and mbpp[367].tests.startswith(
        mbpp[367].meta["test_setup_code"]
    )
    _check_references(chosen)
    wrong = run_program(program_for(humaneval[0], "    return False\n"), 20)
    assert not wrong.passed and "AssertionError" in wrong.stderr
    wrong = run_program(program_for(mbpp[11], "def remove_Occ(s, ch):\n    return s\n"), 20)
    assert not wrong.passed and "AssertionError" in wrong.stderr


@pytest.mark.slow
def test_all_humaneval_and_a_sample_of_mbpp_references_pass(bench):
    mbpp = [item for split in SPLITS["mbpp"] for item in load_task("mbpp", split)]
    _check_references(load_task("humaneval") + seeded_subset(mbpp, 150, seed=0))


# --- small files: templates and errors ------------------------------------------------------


def _write_jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _mbpp_record(task_id):
    return {
        "task_id": task_id,
        "text": f"Task {task_id}.",
        "code": f"def f{task_id}():\r\n    return {task_id}",
        "test_list": [f"assert f{task_id}() == {task_id}", "assert True", "assert 1", "assert 2"],
        "test_setup_code": "",
    }


def test_bench_dir_comes_from_the_environment(tmp_path, monkeypatch):
    _write_jsonl(tmp_path / "gsm8k" / "test.jsonl", [{"question": "1+1?", "answer": "2\n#### 2"}])
    monkeypatch.setenv("TYING_BENCH_DIR", str(tmp_path))
    assert bench_dir() == tmp_path
    (item,) = load_task("gsm8k")
    assert (item.id, item.prompt, item.answer, item.target) == (
        "gsm8k/test/0",
        "Question: 1+1?\nAnswer:",
        "2",
        " 2\n#### 2",
    )


def test_mbpp_rendering_on_a_small_file(tmp_path):
    _write_jsonl(tmp_path / "mbpp" / "mbpp.jsonl", [_mbpp_record(i) for i in (2, 3, 4, 11)])
    (item,) = load_task("mbpp", root=tmp_path, num_fewshot=2)
    shot = "You are an expert Python programmer, and here is your task: Task {i}. Your code should pass these tests:\n\nassert f{i}() == {i}\nassert True\nassert 1\n[BEGIN]\n"
    expected = (
        shot.format(i=2) + "def f2():\r\n    return 2\n[DONE]\n\n"
        + shot.format(i=3) + "def f3():\r\n    return 3\n[DONE]\n\n"
        + shot.format(i=11)
    )  # fmt: skip
    assert item.prompt == expected  # only the first three tests are shown, as in lm-eval
    assert item.tests == "assert f11() == 11\nassert True\nassert 1\nassert 2"  # all tests run
    assert run_program(program_for(item, item.reference), 20).passed
    prompt_items = load_task("mbpp", "prompt", root=tmp_path)  # an example never shows itself
    assert [i.prompt.count("[DONE]") for i in prompt_items] == [2, 2, 2]


def test_humaneval_reads_gzip(tmp_path):
    record = {
        "task_id": "HumanEval/0",
        "prompt": "def f(x):\n",
        "canonical_solution": "    return x\n",
        "test": "def check(c):\n    assert c(3) == 3\n",
        "entry_point": "f",
    }
    (tmp_path / "humaneval").mkdir()
    with gzip.open(tmp_path / "humaneval" / "HumanEval.jsonl.gz", "wt") as f:
        f.write(json.dumps(record) + "\n")
    (item,) = load_task("humaneval", root=tmp_path)
    program = program_for(item, item.reference)
    assert program == "def f(x):\n    return x\n\ndef check(c):\n    assert c(3) == 3\n\ncheck(f)"
    assert run_program(program, 20).passed


def test_errors_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="unknown task 'mmlu': choose one of gsm8k"):
        load_task("mmlu")
    with pytest.raises(ValueError, match="no split 'train': choose one of test"):
        load_task("svamp", "train")
    with pytest.raises(FileNotFoundError, match="TYING_BENCH_DIR"):
        load_task("gsm8k", root=tmp_path)
    with pytest.raises(ValueError, match="mbpp only"):
        load_task("gsm8k", root=tmp_path, num_fewshot=5)
    with pytest.raises(ValueError, match="0 to 3"):
        load_task("mbpp", root=tmp_path, num_fewshot=4)
    path = tmp_path / "gsm8k" / "test.jsonl"
    path.parent.mkdir()
    path.write_text('{"question": "q", "answer": "#### 1"}\n{"question": "q", "answer"\n')
    with pytest.raises(ValueError, match=r"test.jsonl:2: not valid JSON"):
        load_task("gsm8k", root=tmp_path)
    _write_jsonl(path, [{"question": "q"}])
    with pytest.raises(ValueError, match=r"test.jsonl:1: field 'answer' missing"):
        load_task("gsm8k", root=tmp_path)
    _write_jsonl(path, [{"question": "q", "answer": "it is 4"}])
    with pytest.raises(ValueError, match=r"test.jsonl:1: .*#### <number>"):
        load_task("gsm8k", root=tmp_path)
    path.write_text("\n")
    with pytest.raises(ValueError, match="no records"):
        load_task("gsm8k", root=tmp_path)
    (tmp_path / "svamp").mkdir()
    (tmp_path / "svamp" / "SVAMP.json").write_text('{"ID": "x"}')
    with pytest.raises(ValueError, match="expected a JSON list"):
        load_task("svamp", root=tmp_path)
    _write_jsonl(tmp_path / "mbpp" / "mbpp.jsonl", [_mbpp_record(11)])
    with pytest.raises(ValueError, match=r"few-shot tasks \[2, 3, 4\] are missing"):
        load_task("mbpp", root=tmp_path)
    assert len(load_task("mbpp", root=tmp_path, num_fewshot=0)) == 1
    with pytest.raises(ValueError, match="not a program"):
        program_for(TaskItem("svamp/x", "svamp", "Q", "1", "1", None), "print(1)")


# --- seeded subsets ---------------------------------------------------------------------------


def _items(n):
    return [TaskItem(f"t/{i}", "svamp", "", "1", "1", None) for i in range(n)]


def test_seeded_subset_is_the_sha256_ranking():
    items = _items(50)
    subset = seeded_subset(items, 7, seed=3)
    ranked = sorted(items, key=lambda it: hashlib.sha256(f"3:{it.id}".encode()).hexdigest())
    assert {it.id for it in subset} == {it.id for it in ranked[:7]}
    assert [it.id for it in subset] == [it.id for it in items if it in subset]  # input order


def test_seeded_subset_is_stable_nested_and_seeded():
    items = _items(200)
    assert seeded_subset(items, 20) == seeded_subset(list(items), 20)
    small, large = seeded_subset(items, 10), seeded_subset(items, 11)
    assert set(small) < set(large)
    assert seeded_subset(items, 10, seed=1) != small
    assert seeded_subset(items, 500) == items
    assert [it.id for it in seeded_subset(items[::-1], 10)] == [it.id for it in small][::-1]


def test_seeded_subset_errors():
    with pytest.raises(ValueError, match="limit must be >= 1"):
        seeded_subset(_items(3), 0)
    with pytest.raises(ValueError, match="unique ids"):
        seeded_subset(_items(3) + _items(1), 2)


def test_task_list():
    assert TASKS == ("gsm8k", "svamp", "mbpp", "humaneval")
