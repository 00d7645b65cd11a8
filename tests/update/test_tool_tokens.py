"""The generated data of the new-token update (`tying.update.tool_tokens`)."""

from __future__ import annotations

import json

import pytest

from tying.update.tool_tokens import TOOL_TOKENS, tool_call_text, write_tool_token_data


def test_rewrites_calls_and_the_final_answer() -> None:
    answer = "Natalia sold 48/2 = <<48/2=24>>24 clips.\nIn all 48+24 = <<48+24=72>>72.\n#### 72"
    assert tool_call_text(answer) == (
        "Natalia sold 48/2 = <calc>48/2</calc>24 clips.\n"
        "In all 48+24 = <calc>48+24</calc>72.\n<answer>72</answer>"
    )
    with pytest.raises(ValueError, match="####"):
        tool_call_text("no final line")


def test_files_are_deterministic_and_use_every_new_token(tmp_path) -> None:
    first = write_tool_token_data(tmp_path / "a", train_limit=50, test_limit=20)
    second = write_tool_token_data(tmp_path / "b", train_limit=50, test_limit=20)
    assert first == second
    assert (tmp_path / "a" / "tokens.txt").read_text().split("\n")[:-1] == list(TOOL_TOKENS)
    train = [json.loads(line) for line in (tmp_path / "a" / "train.jsonl").open()]
    assert len(train) == 50
    for record in train:
        completion = record["completion"]
        assert all(t in completion for t in TOOL_TOKENS) and "<<" not in completion
        assert completion.count("<calc>") == completion.count("</calc>") >= 1
        assert record["prompt"].startswith("Question: ") and record["prompt"].endswith("Answer:")


def test_interface_update_configs_load_and_add_tokens_is_checked() -> None:
    from pathlib import Path

    from tying.config import ConfigError
    from tying.experiment.config import UpdateSettings, load_experiment

    root = Path(__file__).resolve().parents[2] / "configs" / "experiments"
    a = load_experiment(root / "interface_updates.yaml")
    b = load_experiment(root / "interface_updates_tokens.yaml")
    assert a.updates.finetune["train_interface"] and not a.updates.add_tokens
    assert (
        b.updates.finetune["train_tokens"] == "new" and b.updates.add_tokens["init"] == "subwords"
    )
    assert {r.tie for r in a.runs()} == {"untied", "tt", "pit"} and len(list(a.runs())) == 24
    with pytest.raises(ConfigError, match="tokens"):
        UpdateSettings(bases={"m": "smollm2"}, add_tokens={"init": "mean"})
    with pytest.raises(ConfigError):
        UpdateSettings(bases={"m": "smollm2"}, add_tokens={"tokens": "t.txt", "init": "words"})
