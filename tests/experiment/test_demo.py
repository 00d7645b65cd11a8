"""`tying demo` end to end with a tiny teacher and a tiny budget."""

from __future__ import annotations

import json

import pytest
import torch

from tying.cli import main
from tying.experiment.demo import DEMO_FIT_TOKENS
from tying.train.metrics import read_metrics


def _demo_args(small_corpus, tiny_teacher, out) -> list[str]:
    return [
        "--model",
        str(tiny_teacher),
        "--data",
        str(small_corpus["train"]),
        "--val-data",
        str(small_corpus["val"]),
        "--steps",
        "4",
        "--seq-len",
        "32",
        "--batch-tokens",
        "128",
        "--lens-tokens",
        "256",
        "--precision",
        "fp32",
        "--update-steps",
        "2",
        "--update-limit",
        "2",
        "--side-effect-tokens",
        "256",
        "--out",
        str(out),
        "--no-progress",
    ]


def test_demo_cli(small_corpus, tiny_teacher, tmp_path, capsys) -> None:
    out = tmp_path / "demo"
    assert main(["demo", *_demo_args(small_corpus, tiny_teacher, out)]) == 0
    printed = capsys.readouterr().out
    assert str(out / "report.html") in printed and "teacher-pit-s0" in printed
    report = json.loads((out / "report.json").read_text())
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    assert [r["name"] for r in report["runs"]] == ["teacher-tt-s0", "teacher-pit-s0"]
    # the teacher is tied (U = E): its raw delta_ti is ||E^T E - I||_F, computed here directly
    from transformers import AutoModelForCausalLM

    E = AutoModelForCausalLM.from_pretrained(tiny_teacher).get_input_embeddings().weight
    E = E.detach().double()
    direct = float(torch.linalg.matrix_norm(E.T @ E - torch.eye(E.shape[1], dtype=E.dtype)))
    assert report["teacher"]["consistency"]["raw"]["delta_ti"] == pytest.approx(direct, rel=1e-5)
    assert "norm_frequency" in report["teacher"]
    for run in report["runs"]:
        rows = [r for r in read_metrics(run["run_dir"]) if "lr" in r]
        assert run["last_loss"] == rows[-1]["loss"] and run["steps"] == 4
        assert "grad_out_share" in rows[0]
    pit = report["runs"][1]["probe"]["consistency"]["raw"]
    assert pit["delta_ti"] == pytest.approx(0, abs=1e-3)  # PIT: W_out E = I by construction
    # PIT starts from the default conversion, fitted on the demo's calibration budget
    conversion = json.loads((out / "runs" / "teacher-pit-s0" / "conversion.json").read_text())
    assert conversion["t_init"] == "fit" and conversion["fit"]["tokens"] == DEMO_FIT_TOKENS
    assert [r["run"] for r in report["lens"]["records"]] == [
        "teacher",
        "teacher-tt-s0",
        "teacher-pit-s0",
    ]
    # the update step: the same LoRA on both runs, evaluated before and after, TT vs PIT paired
    updates = report["updates"]
    assert [(a["base"], a["task"], a["steps"]) for a in updates["adapters"]] == [
        ("tt", "mbpp", 2),
        ("pit", "mbpp", 2),
    ]
    for adapter in updates["adapters"]:
        assert adapter["eval"]["mbpp"]["n"] == 2
        side = adapter["side_effects"]["texts"]["wikitext-2"]
        assert side["kl_nats"] > 0 and side["tokens"] == 256
        # the interface is frozen by the LoRA: its metrics do not move
        change = adapter["side_effects"]["interface_change"]
        assert change == dict.fromkeys(
            ("E_rel_change", "E_old_rel_change", "U_rel_change", "U_old_rel_change"), 0.0
        )
    (comparison,) = updates["comparisons"]
    assert (comparison["control"], comparison["treatment"]) == ("tt", "pit")
    assert set(comparison["side_effects"]) == {"wikitext-2"}
    assert "tt + mbpp LoRA: mbpp accuracy" in printed
    # a second run skips the finished runs
    mtime = (out / "runs" / "teacher-tt-s0" / "metrics.jsonl").stat().st_mtime_ns
    assert main(["demo", *_demo_args(small_corpus, tiny_teacher, out)]) == 0
    assert "already finished" in capsys.readouterr().err  # the log
    assert (out / "runs" / "teacher-tt-s0" / "metrics.jsonl").stat().st_mtime_ns == mtime


@pytest.mark.parametrize(
    ("cuda", "fast_bf16", "given", "budget", "limit"),
    [
        (False, "0", {}, 12_288, 1),  # a CPU without fast bf16: half the budget, one item
        (False, "1", {}, 12_288, 1),  # a CPU with fast bf16: the same (15 min 24 s in full)
        (True, "1", {}, 24_576, 2),  # a GPU: the full demo
        (False, "0", {"budget": 24_576, "update_limit": 2}, 24_576, 2),  # the full demo, asked
        (False, "0", {"budget": 40_960, "update_limit": 3}, 40_960, 3),  # a user's own: kept
        (False, "0", {"steps": 5}, None, 1),  # steps given: the budget does not apply
    ],
)
def test_demo_budget_fits_a_cpu(monkeypatch, caplog, cuda, fast_bf16, given, budget, limit) -> None:
    from tying.experiment.demo import DemoOptions, demo_config

    monkeypatch.setenv("TYING_CPU_BF16", fast_bf16)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    with caplog.at_level("INFO", logger="tying.experiment.demo"):
        cfg = demo_config(DemoOptions(**given))
    assert cfg.tokens == budget and cfg.updates.limit == limit
    assert ("for the full demo" in caplog.text) == (budget == 12_288 or limit == 1)
