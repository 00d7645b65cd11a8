"""The update path through the command line, as a user runs it: `tying finetune` (3 steps),
`tying evaluate --adapter --limit 3` through lm-eval, `tying side-effects` on the default texts;
`tying evaluate`'s bad input; SmolLM2 end to end (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tying.cli import main
from tying.evaluation.evaluate import RESULTS_FILE
from tying.evaluation.stats import wilson_interval
from tying.evaluation.tasks import load_task, seeded_subset

from .test_finetune import error_line


def test_finetune_evaluate_side_effects(tiny_base: Path, tmp_path: Path, capsys) -> None:
    adapter = tmp_path / "adapter"
    flags = "--task gsm8k --max-steps 3 --batch-size 2 --max-seq-len 96 --lr 1e-2 --no-progress"
    assert main(["finetune", str(tiny_base), "--out", str(adapter), *flags.split()]) == 0
    evaluation = tmp_path / "eval"
    flags = "--tasks gsm8k,svamp mbpp --limit 3 --max-new-tokens 4 --num-fewshot 0"
    argv = ["evaluate", str(tiny_base), "--adapter", str(adapter), "--out", str(evaluation)]
    assert main([*argv, *flags.split()]) == 0
    printed = capsys.readouterr().out
    assert "gsm8k: accuracy" in printed and f"wrote {evaluation}/{RESULTS_FILE}" in printed
    results = json.loads((evaluation / RESULTS_FILE).read_text())
    assert list(results["tasks"]) == ["gsm8k", "svamp", "mbpp"]
    assert results["run"]["adapter"] == str(adapter)
    for task, entry in results["tasks"].items():
        assert [i["id"] for i in entry["items"]] == [
            i.id for i in seeded_subset(load_task(task), 3)
        ]
        correct = sum(i["correct"] for i in entry["items"])
        assert entry["n"] == 3 and entry["accuracy"] == correct / 3
        assert entry["ci95"] == pytest.approx(list(wilson_interval(correct, 3)))
        assert entry["ref_loglik_per_token"] < 0

    effects = tmp_path / "side-effects"
    argv = ["side-effects", str(tiny_base), str(tiny_base), "--adapter", str(adapter)]
    flags = "--max-tokens 512 --lens-tokens 256 --no-progress"
    assert main([*argv, "--out", str(effects), *flags.split()]) == 0
    report = json.loads((effects / "side_effects.json").read_text())
    assert set(report["texts"]) == {"wikitext-2", "gutenberg-validation"}
    for entry in report["texts"].values():
        assert isinstance(entry["kl_nats"], float) and entry["kl_nats"] > 0
        assert isinstance(entry["delta_loss"], float)
        assert 0.0 <= entry["top1_agreement"] <= 1.0
        assert entry["tokens"] == 512
    assert len(report["lens_kl_change"]) == 3
    assert report["interface"]["before"] == report["interface"]["after"]
    assert [p.name for p in effects.iterdir()] == ["side_effects.json"]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("unknown task", "unknown task 'gsm9k'"),
        ("limit 0", "limit must be a positive number"),
        ("missing file", "TYING_BENCH_DIR"),
        ("malformed file", "not valid JSON"),
        ("no tokenizer", "has no tokenizer"),
        ("foreign adapter", "another base model"),
        ("not empty", "is not empty"),
    ],
)
def test_evaluate_bad_input(
    case: str, message: str, tiny_base: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    from tying.update import finetune

    from ..evaluation._harness_models import save_tiny_model, train_tokenizer
    from .test_finetune import options

    out = tmp_path / "out"
    spec, extra = str(tiny_base), ["--tasks", "gsm8k", "--limit", "1"]
    if case == "unknown task":
        extra = ["--tasks", "gsm8k,gsm9k"]
    elif case == "limit 0":
        extra = ["--tasks", "gsm8k", "--limit", "0"]
    elif case == "missing file":
        monkeypatch.setenv("TYING_BENCH_DIR", str(tmp_path / "nothing"))
    elif case == "malformed file":
        bench = tmp_path / "bench" / "gsm8k"
        bench.mkdir(parents=True)
        (bench / "test.jsonl").write_text('{"question": "1+1?"\n')
        monkeypatch.setenv("TYING_BENCH_DIR", str(bench.parent))
    elif case == "no tokenizer":
        from transformers import AutoModelForCausalLM

        AutoModelForCausalLM.from_pretrained(tiny_base).save_pretrained(tmp_path / "bare")
        spec = str(tmp_path / "bare")
    elif case == "foreign adapter":  # same architecture and tokenizer, other weights
        other = save_tiny_model(tmp_path / "other", train_tokenizer(), seed=1)
        finetune(options(other, tmp_path / "adapter", max_steps=1))
        extra = [*extra, "--adapter", str(tmp_path / "adapter")]
    else:
        out.mkdir()
        (out / "keep.txt").write_text("mine")
    code = main(["evaluate", spec, "--out", str(out), *extra])
    assert code == 2
    assert message in error_line(capsys.readouterr().err, "evaluate")
    if case == "not empty":
        assert [p.name for p in out.iterdir()] == ["keep.txt"]
    else:
        assert not out.exists()


@pytest.mark.slow
def test_smollm2_end_to_end(tmp_path: Path) -> None:
    """SmolLM2-135M: 2 MBPP LoRA steps, one item of each task through lm-eval under the adapter,
    and the side effects on a small budget (the adapter moves the model a little, the interface
    not at all)."""
    pytest.importorskip("gguf")
    from tying.hf import named_model_path

    try:
        named_model_path("smollm2")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    adapter = tmp_path / "adapter"
    flags = "--task mbpp --max-steps 2 --batch-size 2 --max-seq-len 256 --no-progress"
    assert main(["finetune", "smollm2", "--out", str(adapter), *flags.split()]) == 0
    summary = json.loads((adapter / "finetune.json").read_text())
    assert summary["base"]["vocab_size"] == 49152 and summary["base"]["tie"] == "tt"
    argv = ["evaluate", "smollm2", "--adapter", str(adapter), "--out", str(tmp_path / "eval")]
    assert main([*argv, "--limit", "1", "--max-new-tokens", "32"]) == 0
    results = json.loads((tmp_path / "eval" / RESULTS_FILE).read_text())
    assert all(-4.0 < e["ref_loglik_per_token"] < 0 for e in results["tasks"].values())
    argv = ["side-effects", "smollm2", "smollm2", "--adapter", str(adapter)]
    flags = "--max-tokens 512 --lens-tokens 256 --no-progress"
    assert main([*argv, "--out", str(tmp_path / "se"), *flags.split()]) == 0
    report = json.loads((tmp_path / "se" / "side_effects.json").read_text())
    for entry in report["texts"].values():
        assert 0 < entry["kl_nats"] < 0.1 and entry["top1_agreement"] > 0.9
    assert report["interface"]["before"] == report["interface"]["after"]
