"""The update stage of `tying experiment` (`ExperimentConfig.updates`): adapters, evaluations,
side effects and paired comparisons written where documented, a rerun skips every step, two
identical bases compare as identical, and bad settings are refused before anything runs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tying.config import ConfigError, from_dict
from tying.experiment.config import ExperimentConfig
from tying.experiment.render_updates import add_updates_section
from tying.experiment.updates import (
    analyze_updates,
    base_eval_folder,
    run_updates,
    update_folders,
)
from tying.report import Document


def _config(out: Path, bases: dict[str, str], **updates) -> ExperimentConfig:
    section = {
        "bases": bases,
        "tasks": ["gsm8k"],
        "eval_tasks": ["gsm8k", "mbpp"],
        "limit": 2,
        "compare": [["control", "treatment"]] if len(bases) == 2 else [],
        "finetune": {"max_steps": 2, "batch_size": 2, "max_seq_len": 96, "lr": 1e-2},
        "evaluate": {"max_new_tokens": 4, "num_fewshot": 0},
        "side_effects": {"max_tokens": 256, "lens_tokens": 0, "texts": ["wikitext-2"]},
        **updates,
    }
    return from_dict(
        ExperimentConfig,
        {"out": str(out), "ties": ["tt"], "train": {"preset": "tiny"}, "updates": section},
    )


def _stage_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tying.experiment.updates"]


def test_update_stage_end_to_end(
    tiny_base: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = _config(tmp_path, {"control": str(tiny_base), "treatment": str(tiny_base)})
    caplog.set_level(logging.INFO, logger="tying")
    run_updates(cfg, progress=False)
    assert len(_stage_lines(caplog)) == 2 * 4
    for base in ("control", "treatment"):
        f = update_folders(cfg, base, "gsm8k")
        assert (base_eval_folder(cfg, base) / "results.json").is_file()
        assert (f.adapter / "adapter_model.safetensors").is_file()
        assert (f.eval / "results.json").is_file()
        assert (f.side_effects / "side_effects.json").is_file()
        results = json.loads((f.eval / "results.json").read_text())
        assert results["run"]["adapter"] == str(f.adapter) and results["tasks"]["mbpp"]["n"] == 2

    caplog.clear()
    run_updates(cfg, progress=False)  # a rerun does nothing again
    lines = _stage_lines(caplog)
    assert len(lines) == 8 and all(line.endswith("already done, skipped") for line in lines)

    report = analyze_updates(cfg, n_resamples=200)
    assert list(report["bases"]) == ["control", "treatment"]
    assert [(a["base"], a["task"], a["steps"]) for a in report["adapters"]] == [
        ("control", "gsm8k", 2),
        ("treatment", "gsm8k", 2),
    ]
    adapter = report["adapters"][0]
    side = adapter["side_effects"]["texts"]["wikitext-2"]
    assert side["kl_nats"] > 0 and side["tokens"] == 256
    base_ll = report["bases"]["control"]["eval"]["gsm8k"]["ref_loglik_per_token"]
    updated_ll = adapter["eval"]["gsm8k"]["ref_loglik_per_token"]
    assert adapter["change"]["gsm8k"]["delta_ref_loglik_per_token"] == pytest.approx(
        updated_ll - base_ll
    )
    # the same base, seed and update twice: every paired difference is exactly zero
    (comparison,) = report["comparisons"]
    assert comparison["task"] == "gsm8k"
    for entry in comparison["updated"].values():
        assert entry["delta_accuracy"] == 0 and entry["mcnemar"]["p_value"] == 1.0
    assert comparison["gain"]["gsm8k"]["difference"] == 0.0
    f = update_folders(cfg, "control", "gsm8k")
    per_item = [
        [
            i["ref_loglik"] / i["ref_tokens"]
            for i in json.loads(p.read_text())["tasks"]["gsm8k"]["items"]
        ]
        for p in (base_eval_folder(cfg, "control") / "results.json", f.eval / "results.json")
    ]
    expected = sum(u - b for b, u in zip(*per_item, strict=True)) / 2
    assert comparison["gain"]["gsm8k"]["control_change"] == pytest.approx(expected, abs=1e-12)
    effect = comparison["side_effects"]["wikitext-2"]
    assert effect["difference"] == 0.0 and effect["ratio"] == 1.0

    doc = Document("report")
    add_updates_section(doc, report)
    text = doc.markdown(tmp_path)
    assert "treatment vs control, gsm8k LoRA" in text and "KL(base ‖ updated)" in text


def test_update_stage_missing_outputs_are_named(tiny_base: Path, tmp_path: Path) -> None:
    cfg = _config(tmp_path, {"only": str(tiny_base)})
    with pytest.raises(FileNotFoundError, match="run the experiment's update stage"):
        analyze_updates(cfg)


@pytest.mark.parametrize(
    ("updates", "message"),
    [
        ({"compare": [["control", "other"]]}, "two different names of updates.bases"),
        ({"finetune": {"task": "mbpp"}}, "set by the update stage"),
        ({"finetune": {"max_step": 3}}, "max_step"),
        ({"evaluate": {"limit": 3}}, "set by the update stage"),
        ({"eval_tasks": ["gsm9k"]}, "unknown task 'gsm9k'"),
        ({"limit": 0}, "updates.limit must be >= 1"),
        ({"bases": {"control": "teacher-pit-s0"}}, "looks like a grid run"),
        ({"bases": {"a b": "smollm2"}}, "names a folder"),
        ({"side_effects": {"skip": "yes"}}, "skip must be true or false"),
    ],
)
def test_update_settings_refused(updates: dict, message: str, tmp_path: Path) -> None:
    bases = updates.pop("bases", {"control": "smollm2"})
    with pytest.raises(ConfigError, match=message):
        _config(tmp_path, bases, **updates)


def test_update_bases_resolve(tmp_path: Path) -> None:
    cfg = from_dict(
        ExperimentConfig,
        {
            "out": str(tmp_path),
            "ties": ["tt", "pit"],
            "modes": ["teacher"],
            "teacher_model": "smollm2",
            "updates": {"bases": {"as-is": "teacher", "pit": "teacher-pit-s0", "x": "some/dir"}},
        },
    )
    assert cfg.update_base_spec("teacher") == "smollm2"
    assert cfg.update_base_spec("teacher-pit-s0") == str(tmp_path / "runs" / "teacher-pit-s0")
    assert cfg.update_base_spec("some/dir") == "some/dir"


def test_named_bases_take_the_finetune_seed_else_the_stage_seed(tmp_path: Path) -> None:
    from tying.experiment.updates import update_bases

    cfg = _config(tmp_path, {"a": "smollm2"}, seed=4)
    assert [(b.name, b.spec, b.lora_seed) for b in update_bases(cfg)] == [("a", "smollm2", 4)]
    cfg = _config(tmp_path, {"a": "smollm2"}, seed=4, finetune={"max_steps": 2, "seed": 9})
    assert update_bases(cfg)[0].lora_seed == 9
