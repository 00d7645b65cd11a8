"""Training examples: task templates, the JSONL format and its errors, tokenization with the
prompt masked (hand-computed ids and labels), a seeded resumable order."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tying.evaluation.tasks import MBPP_TEMPLATE, load_task
from tying.update.data import (
    IGNORE_INDEX,
    Example,
    ExampleOrder,
    TokenizedExample,
    collate,
    load_examples,
    read_examples,
    tokenize_examples,
)

from .conftest import write_jsonl


def test_mbpp_training_split_and_template() -> None:
    examples = load_examples("mbpp")
    assert len(examples) == 374
    assert [e.id for e in examples] == [f"mbpp/{i}" for i in range(601, 975)]
    record = next(i for i in load_task("mbpp", "train") if i.id == "mbpp/601").meta
    first = examples[0]
    assert first.prompt == MBPP_TEMPLATE.format(
        text=record["text"], tests="\n".join(record["test_list"][:3])
    )
    assert first.prompt.endswith("[BEGIN]\n") and "You are an expert" in first.prompt
    assert first.prompt.count("[BEGIN]") == 1  # zero-shot: no examples in front
    assert first.completion == record["code"] + "\n[DONE]"


def test_gsm8k_training_split_and_template() -> None:
    examples = load_examples("gsm8k")
    assert len(examples) == 7473
    item = load_task("gsm8k", "train")[5]
    assert examples[5] == Example(
        item.id, f"Question: {item.meta['question']}\nAnswer:", " " + item.meta["answer"]
    )
    assert examples[5].completion.split("####")[-1].strip() == item.answer


def test_jsonl_records(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text(
        '{"prompt": "a", "completion": "b"}\n\n{"prompt": "", "completion": "c", "id": 7, "x": 1}\n'
    )
    assert read_examples(path) == [Example("data.jsonl:1", "a", "b"), Example("7", "", "c")]
    assert load_examples(str(path)) == read_examples(path)


@pytest.mark.parametrize(
    ("lines", "match"),
    [
        (['{"prompt": "a", "completion": "b"}', '{"prompt": "a"'], r"data.jsonl:2: not valid JSON"),
        (['["a", "b"]'], r"data.jsonl:1: expected a JSON object"),
        (['{"completion": "b"}'], r"data.jsonl:1: field 'prompt'"),
        (['{"prompt": "a", "completion": ""}'], r"data.jsonl:1: field 'completion'"),
        (['{"prompt": "a", "completion": 3}'], r"data.jsonl:1: field 'completion'"),
        (["", "  "], r"holds no records"),
    ],
)
def test_malformed_jsonl(tmp_path: Path, lines: list[str], match: str) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=match):
        load_examples(str(path))


def test_missing_file_and_unknown_task(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        load_examples(str(tmp_path / "none.jsonl"))
    with pytest.raises(ValueError, match="unknown task 'humaneval2'"):
        load_examples("humaneval2")
    with pytest.raises(ValueError, match="no training split"):
        load_examples("svamp")


def encode(text: str) -> list[int]:
    """One id per character (its code point)."""
    return [ord(c) for c in text]


def test_tokenize_masks_cuts_and_skips() -> None:
    examples = [Example("a", "ab", "cd"), Example("b", "abcdef", "g"), Example("c", "xyz", "12345")]
    data = tokenize_examples(examples, encode, max_seq_len=6, eos_id=0)
    # "ab" + "cd" + EOS fits; "abcdef" fills the window (skipped); "xyz" + "12345" + EOS is cut
    assert data.examples == [
        TokenizedExample((97, 98, 99, 100, 0), 2),
        TokenizedExample((120, 121, 122, 49, 50, 51), 3),
    ]
    assert data.truncated == 1 and data.skipped == ["b"]
    assert data.summary()["answer_tokens"] == 3 + 3
    no_eos = tokenize_examples(examples[:1], encode, max_seq_len=6, eos_id=None)
    assert no_eos.examples[0].ids == (97, 98, 99, 100)
    with pytest.raises(ValueError, match="raise max_seq_len"):
        tokenize_examples(examples[1:2], encode, max_seq_len=6)


def test_collate_shifts_and_masks() -> None:
    batch = [TokenizedExample((5, 6, 7, 8), 2), TokenizedExample((1, 2, 3), 1)]
    inputs, targets = collate(batch, pad_id=9)
    assert inputs.tolist() == [[5, 6, 7], [1, 2, 9]]
    # the first answer token is predicted from the last prompt token; padding predicts nothing
    assert targets.tolist() == [[IGNORE_INDEX, 7, 8], [2, 3, IGNORE_INDEX]]
    assert inputs.dtype == targets.dtype == torch.long


def test_order_is_seeded_epochs_and_resumable() -> None:
    order = ExampleOrder(5, seed=3)
    drawn = [order.next_batch(2) for _ in range(5)]  # 10 = two epochs
    flat = [i for batch in drawn for i in batch]
    assert sorted(flat[:5]) == sorted(flat[5:]) == list(range(5))
    assert flat[:5] == torch.randperm(5, generator=torch.Generator().manual_seed(3)).tolist()
    assert flat[5:] == torch.randperm(5, generator=torch.Generator().manual_seed(4)).tolist()
    again = ExampleOrder(5, seed=3)
    again.next_batch(3)
    state = again.state_dict()
    resumed = ExampleOrder(5, seed=3)
    resumed.load_state_dict(state)
    assert [resumed.next_batch(2) for _ in range(3)] == [again.next_batch(2) for _ in range(3)]
    with pytest.raises(ValueError, match="same task"):
        ExampleOrder(6, seed=3).load_state_dict(state)


def test_write_jsonl_helper(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "x.jsonl", [{"prompt": "p", "completion": "c"}])
    assert read_examples(path) == [Example("x.jsonl:1", "p", "c")]
