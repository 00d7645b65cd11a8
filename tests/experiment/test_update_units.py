"""The update experiment's statistics (`tying.experiment.update_units`, docs/updates-design.md)
against hand-computed values: a base's metrics from its files, the matched loss, the per-seed
differences read on each run's own line, the sign-flip p, Holm and the ratio verdict; the
`updates.units` settings; and the stage end to end on tiny runs of our decoder."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tying.config import ConfigError, from_dict
from tying.evaluation.stats import paired_unit_summary
from tying.experiment.config import ExperimentConfig
from tying.experiment.update_units import (
    base_record,
    compare_units,
    matched_loss_point,
    metric_values,
    ratio_verdict,
    unit_differences,
)

from ..conftest import tiny_train_settings


def _results(per_item: list[tuple[float, int]]) -> dict:
    """A results.json with one task: items (ref_loglik, ref_tokens)."""
    items = [
        {"id": str(i), "ref_loglik": ll, "ref_tokens": n} for i, (ll, n) in enumerate(per_item)
    ]
    total = sum(ll for ll, _ in per_item) / sum(n for _, n in per_item)
    return {"tasks": {"gsm8k": {"ref_loglik_per_token": total, "items": items}}}


def test_base_record_is_the_design_metric() -> None:
    before = _results([(-20.0, 10), (-30.0, 10)])  # -2.5 nats/token
    after = _results([(-16.0, 10), (-24.0, 10)])  # -2.0: gain 0.5
    before["tasks"]["mbpp"] = _results([(-10.0, 5)])["tasks"]["gsm8k"]
    after["tasks"]["mbpp"] = _results([(-11.0, 5)])["tasks"]["gsm8k"]  # cross -0.2
    side = {
        "texts": {
            "wikitext-2": {"kl_nats": 0.01, "per_window": {"kl_nats": [0.02, 0.0]}},
            "gutenberg-validation": {"kl_nats": 0.04, "per_window": {"kl_nats": [0.04]}},
        },
        "lens_kl_change": [9.0, 0.1, 0.3, 5.0, 7.0, 0.0],  # entries 0..5: L = 5, half = 2
        "interface_change": {
            "E_rel_change": 0.5,
            "E_old_rel_change": 0.25,
            "U_rel_change": 0.5,
            "U_old_rel_change": None,
        },
    }
    record = base_record(before, after, side, "gsm8k")
    assert record["drift"] == {"E": 0.25, "U": None}
    assert record["gain"] == pytest.approx(0.5)
    assert record["cross"] == {"mbpp": pytest.approx(-0.2)}
    assert record["y"]["wikitext-2"] == pytest.approx(math.log(0.01 / 0.5))
    assert record["y"]["gutenberg-validation"] == pytest.approx(math.log(0.08))
    assert record["lens_first_half"] == pytest.approx(0.2)  # mean of entries 1 and 2
    assert record["items"]["gsm8k"] == [pytest.approx(0.4), pytest.approx(0.6)]
    assert record["kl_per_window"]["wikitext-2"] == [0.02, 0.0]
    values = metric_values(record)
    assert values["ln_kl:gutenberg-validation"] == pytest.approx(math.log(0.04))
    assert set(values) == {
        "y:wikitext-2",
        "y:gutenberg-validation",
        "ln_kl:wikitext-2",
        "ln_kl:gutenberg-validation",
        "cross:mbpp",
        "drift:E_old",
        "drift:U_old",
        "lens_first_half",
    }
    assert values["drift:E_old"] == 0.25 and math.isnan(values["drift:U_old"])
    after["tasks"]["gsm8k"] = before["tasks"]["gsm8k"]  # no gain: no ratio
    assert math.isnan(base_record(before, after, side, "gsm8k")["y"]["wikitext-2"])


def _record(label: str, seed: int, loss: float, **metrics: float) -> dict:
    return {
        "label": label,
        "base_seed": seed,
        "lora_seed": seed,
        "base_loss": loss,
        "metrics": metrics,
    }


def test_matched_loss_point_is_the_middle_of_the_overlap() -> None:
    records = [_record("tt", 0, x) for x in (6.7, 7.0)] + [_record("pit", 0, x) for x in (6.9, 7.1)]
    assert matched_loss_point(records, "tt", "pit") == pytest.approx(6.95)
    disjoint = [_record("tt", 0, 6.0), _record("pit", 0, 7.0)]
    with pytest.raises(ValueError, match="do not overlap"):
        matched_loss_point(disjoint, "tt", "pit")


def test_unit_differences_read_each_seeds_own_lines() -> None:
    # seed 0: tt m = 2·loss (points 6, 7), pit m = loss + 1 (points 6.5, 7.5); at 7: 14 vs 8
    # seed 1: tt m = 1 (flat, points 6, 8), pit m = 3 (points 6, 7, 8): 3 − 1 = 2
    # seed 2: pit has one finite point: left out
    points = {  # (label, seed): [(base loss, m), ...]
        ("tt", 0): [(6.0, 12.0), (7.0, 14.0)],
        ("pit", 0): [(6.5, 7.5), (7.5, 8.5)],
        ("tt", 1): [(6.0, 1.0), (8.0, 1.0)],
        ("pit", 1): [(6.0, 3.0), (7.0, 3.0), (8.0, 3.0)],
        ("tt", 2): [(6.0, 1.0), (7.0, 1.0)],
        ("pit", 2): [(6.0, 1.0), (7.0, math.nan)],
    }
    records = [
        _record(label, seed, loss, m=m)
        for (label, seed), rows in points.items()
        for loss, m in rows
    ]
    units = unit_differences(records, "m", "tt", "pit", at_loss=7.0)
    assert [u["base_seed"] for u in units] == [0, 1]
    assert units[0]["difference"] == pytest.approx(8.0 - 14.0)
    assert units[0]["extrapolated"] is False
    assert units[1]["difference"] == pytest.approx(2.0)
    far = unit_differences(records, "m", "tt", "pit", at_loss=7.75)
    assert far[0]["extrapolated"] is True  # outside tt's 6-7 of seed 0
    assert far[1]["extrapolated"] is False


def test_paired_unit_summary_by_hand() -> None:
    out = paired_unit_summary([1.0, 2.0, 3.0])
    assert out["mean"] == 2.0 and out["sd"] == pytest.approx(1.0)
    assert out["t_crit"] == pytest.approx(4.302653, rel=1e-6)  # t(0.975, 2 df)
    half = 4.302653 / math.sqrt(3)
    assert out["ci95"] == [pytest.approx(2 - half, rel=1e-6), pytest.approx(2 + half, rel=1e-6)]
    assert out["sign_flip"] == {"p": pytest.approx(0.25), "smallest_possible_p": 0.25}
    assert paired_unit_summary([0.5]) == {"n": 1, "differences": [0.5], "mean": 0.5}


def test_compare_units_tests_the_primary_and_holm_corrects_the_family() -> None:
    # 6 seeds, 2 checkpoints per run at losses 6 and 7 (L* = 6.5); metric value = seed's offset
    # for pit, 0 for tt, so each unit's difference is the offset.
    y_offsets = [-0.5, -0.4, -0.6, -0.3, -0.45, -0.55]  # all negative: p = 2/64
    c_offsets = [0.1, -0.1, 0.2, -0.2, 0.05, -0.05]  # symmetric-ish: p large
    records = []
    for seed, (dy, dc) in enumerate(zip(y_offsets, c_offsets, strict=True)):
        for loss in (6.0, 7.0):
            records.append(
                _record("tt", seed, loss, **{"y:w": 0.0, "cross:x": 0.0, "ln_kl:w": 0.0})
            )
            records.append(
                _record("pit", seed, loss, **{"y:w": dy, "cross:x": dc, "ln_kl:w": dy / 2})
            )
    out = compare_units(records, "tt", "pit", "y:w", ["cross:x", "ln_kl:w"])
    assert out["at_loss"] == pytest.approx(6.5)
    primary = out["primary"]
    assert primary["n"] == 6
    assert primary["differences"] == pytest.approx(y_offsets)
    assert primary["sign_flip"]["p"] == pytest.approx(2 / 64)
    assert primary["ratio"] == pytest.approx(math.exp(sum(y_offsets) / 6))
    assert primary["verdict"].startswith("treatment smaller")
    assert [u["base_seed"] for u in primary["units"]] == list(range(6))
    assert primary["control_sd"] == 0.0
    mean = sum(y_offsets) / 6
    sd = math.sqrt(sum((v - mean) ** 2 for v in y_offsets) / 5)
    assert primary["treatment_sd"] == pytest.approx(sd)
    # Holm over the family of two: p sorted (2/64 for ln_kl, p_c for cross) -> 2·2/64, max(.., p_c)
    p_cross = out["secondary"]["cross:x"]["sign_flip"]["p"]
    p_kl = out["secondary"]["ln_kl:w"]["sign_flip"]["p"]
    assert p_kl == pytest.approx(2 / 64) and p_cross > 0.5
    assert out["secondary"]["ln_kl:w"]["p_holm"] == pytest.approx(4 / 64)
    assert out["secondary"]["cross:x"]["p_holm"] == pytest.approx(p_cross)
    assert (
        out["secondary"]["cross:x"]["kind"] == "nats" and "ratio" not in out["secondary"]["cross:x"]
    )


def test_the_report_section_shows_the_primary_verdict_and_a_missing_overlap(
    tmp_path: Path,
) -> None:
    from tying.experiment.render_updates import add_update_units_section
    from tying.report import Document

    records = []
    for seed, d in enumerate([-0.5, -0.4, -0.6, -0.3, -0.45, -0.55]):
        for loss in (6.0, 7.0):
            records.append(_record("tt", seed, loss, **{"y:w": 0.0, "cross:x": 0.0}))
            records.append(_record("pit", seed, loss, **{"y:w": d, "cross:x": d}))
    comparison = compare_units(records, "tt", "pit", "y:w", ["cross:x"])
    units = {
        "bases": records,
        "comparisons": [
            {"task": "gsm8k", **comparison},
            {"task": "mbpp", "control": "tt", "treatment": "pit", "error": "do not overlap"},
        ],
    }
    doc = Document("report")
    add_update_units_section(doc, units)
    text = doc.markdown(tmp_path)
    assert "24 bases" in text
    assert "pit − tt, gsm8k LoRA, at base loss 6.5" in text
    assert comparison["primary"]["verdict"] in text
    assert "pit − tt, mbpp LoRA: no comparison (do not overlap)" in text


def test_ratio_verdict_names_what_the_interval_excludes() -> None:
    undecided = {"n": 8, "mean": 0.0, "sign_flip": {"p": 0.6}, "ratio_ci95": [0.8, 1.3]}
    assert ratio_verdict(undecided, 1.5) == (
        "undecided (p 0.6): ratios outside 0.80-1.30 excluded, so effects beyond 1.5x either "
        "way are excluded"
    )
    wide = dict(undecided, ratio_ci95=[0.5, 1.3])
    assert ratio_verdict(wide, 1.5) == (
        "undecided (p 0.6): ratios outside 0.50-1.30 excluded; a 1.5x effect is not excluded"
    )
    assert ratio_verdict({"n": 1}, 1.5).startswith("undecided: 1 unit")


def _units_config(out: Path, **updates) -> ExperimentConfig:
    section = {"units": True, "tasks": ["gsm8k"], "compare": [["tt", "pit"]], **updates}
    return from_dict(
        ExperimentConfig,
        {"out": str(out), "ties": ["tt", "pit"], "seeds": [0, 1], "updates": section},
    )


@pytest.mark.parametrize(
    ("updates", "message"),
    [
        ({"bases": {"a": "smollm2"}}, "remove updates.bases"),
        ({"compare": []}, "needs updates.compare"),
        ({"compare": [["tt", "untied"]]}, "two different labels of the grid"),
        ({"finetune": {"seed": 3}}, "each LoRA's seed is its run's seed"),
        ({"unit_steps": [10]}, "needs updates.units and >= 2 steps"),
        ({"targets": {"mbpp": "held-out.jsonl"}}, "are not update tasks"),
        ({"targets": {"gsm8k": "held-out.txt"}}, "must be a .jsonl file"),
    ],
)
def test_units_settings_refused(updates: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message):
        _units_config(tmp_path, **updates)


def test_units_need_trained_runs(tmp_path: Path) -> None:
    from tying.experiment.updates import update_bases

    cfg = _units_config(tmp_path)
    assert cfg.updates.enabled
    with pytest.raises(FileNotFoundError, match="train the grid before its update units"):
        update_bases(cfg)


@pytest.mark.slow
def test_units_stage_end_to_end(small_corpus, tmp_path: Path, monkeypatch) -> None:
    """A 2 × 2 grid of 2-step runs, a checkpoint after each step: 8 bases, each updated and
    measured (`tying experiment --updates-only`); the analysis pairs the seeds and stores every
    base's values; a rerun skips every step."""
    from tying.experiment import run_updates_only
    from tying.experiment.updates import update_bases

    monkeypatch.setenv("TYING_CACHE_DIR", str(tmp_path / "cache"))
    train = tiny_train_settings(small_corpus, tmp_path, max_steps=2, eval_every=1)
    for key in ("out", "checkpoint_every"):
        train.pop(key)
    train["val_data"] = str(small_corpus["val"])
    cfg = from_dict(
        ExperimentConfig,
        {
            "out": str(tmp_path / "exp"),
            "ties": ["tt", "pit"],
            "seeds": [0, 1],
            "checkpoints": 2,
            "train": train,
            "updates": {
                "units": True,
                "tasks": ["gsm8k"],
                "compare": [["tt", "pit"]],
                "eval_tasks": ["gsm8k", "mbpp"],
                "limit": 2,
                "finetune": {"max_steps": 2, "batch_size": 2, "max_seq_len": 96, "lr": 1e-2},
                "evaluate": {"generate": False, "num_fewshot": 0, "precision": "fp32"},
                "side_effects": {
                    "max_tokens": 64,
                    "lens_tokens": 32,
                    "texts": ["wikitext-2"],
                    "seq_len": 32,
                },
            },
        },
    )
    path = run_updates_only(cfg, progress=False)
    bases = update_bases(cfg)
    assert [(b.name, b.lora_seed) for b in bases[:2]] == [
        ("scratch-tt-s0-step1", 0),
        ("scratch-tt-s0-step2", 0),
    ]
    assert len(bases) == 8
    report = json.loads(path.read_text())["update_units"]
    assert len(report["bases"]) == 8
    first = report["bases"][0]
    assert {"base_seed", "lora_seed", "step", "base_loss", "gain", "kl", "items"} <= set(first)
    assert len(first["items"]["gsm8k"]) == 2 and len(first["kl_per_window"]["wikitext-2"]) == 2
    (comparison,) = report["comparisons"]
    assert comparison["control"] == "tt" and comparison["treatment"] == "pit"
    if "error" in comparison:  # 2-step runs need not overlap in loss
        assert "do not overlap" in comparison["error"]
    else:
        assert comparison["primary_metric"] == "y:wikitext-2"
        assert comparison["primary"]["n"] <= 2
    before = path.stat().st_mtime_ns
    adapters = sorted(p.stat().st_mtime_ns for p in (cfg.root / "updates").rglob("*.safetensors"))
    run_updates_only(cfg, progress=False)  # everything skipped, the same file rewritten
    assert json.loads(path.read_text())["update_units"] == report
    assert path.stat().st_mtime_ns >= before
    assert adapters == sorted(
        p.stat().st_mtime_ns for p in (cfg.root / "updates").rglob("*.safetensors")
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--train-only", "--updates-only"], "exclude each other"),
        (["--updates-only"], "has no update stage"),
        (["--updates-only", "--shard", "0/2"], "give I/N with 1 <= I <= N"),
        (["--updates-only", "--shard", "two"], "give I/N with 1 <= I <= N"),
        (["--shard", "1/2"], "--shard needs --updates-only"),
    ],
)
def test_updates_only_bad_input_is_one_line(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tying.cli import main

    config = tmp_path / "grid.yaml"
    config.write_text(f"out: {tmp_path / 'exp'}\nties: [tt]\n")
    assert main(["experiment", str(config), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "exp").exists()  # nothing trained
