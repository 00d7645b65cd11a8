"""The verbs end to end: `tying lens`, `tying trace`, `tying plot` (called through their modules)."""

from __future__ import annotations

import json
import math

import pytest

from tying.cli import main
from tying.commands import lens as lens_cmd
from tying.commands import plot as plot_cmd
from tying.commands import trace as trace_cmd
from tying.lens import TunedLens
from tying.train.metrics import metric_series, rolling_mean

PNG = b"\x89PNG\r\n\x1a\n"


def _run(module, argv: list[str]) -> int:
    return main([module.__name__.rsplit(".", 1)[-1], *[str(a) for a in argv]])


def test_lens_verb_logit_and_tuned(tmp_path, tiny_run, tiny_corpus, capsys) -> None:
    out = tmp_path / "lens"
    argv = [tiny_run, tiny_run, "--kind", "both", "--data", tiny_corpus["val"], "--out", out]
    argv += ["--max-tokens", 256, "--seq-len", 32, "--batch-size", 4, "--train-steps", 3]
    argv += ["--train-tokens-per-step", 64, "--precision", "fp32", "--no-progress"]
    assert _run(lens_cmd, argv) == 0
    data = json.loads((out / "lens.json").read_text())
    assert set(data) == {"models"}
    records = data["models"]
    assert [(r["name"], r["kind"]) for r in records] == [
        ("tiny-tt", "logit"),
        ("tiny-tt", "tuned"),
        ("tiny-tt-2", "logit"),
        ("tiny-tt-2", "tuned"),
    ]
    for r in records:
        assert {"name", "kind", "unit", "tokens", "kl"} <= set(r)
        assert r["unit"] == "bits/token" and r["tokens"] == 256
        assert len(r["kl"]) == 4 + 1  # the tiny preset: 4 blocks + the embedding output
        assert abs(r["kl"][-1]) < 1e-6
        assert all(math.isfinite(v) and v >= -1e-7 for v in r["kl"])
        assert r["bytes"] > 0 and len(r["kl_bits_per_byte"]) == 5
    assert (out / "lens.png").read_bytes()[:8] == PNG
    saved = TunedLens.load(out / "tuned" / "tiny-tt")
    assert saved.n_entries == 5 and saved.training_record["steps"] == 3
    assert saved.training_record["first_window"] == 256 // 32
    assert "tying lens: tiny-tt (tuned lens)" in capsys.readouterr().err  # the log

    # the saved lenses are reused with --tuned-from: same numbers, no training
    again = tmp_path / "again"
    argv = [tiny_run, "--kind", "tuned", "--data", tiny_corpus["val"], "--out", again]
    argv += ["--max-tokens", 256, "--seq-len", 32, "--tuned-from", out / "tuned", "--no-progress"]
    argv += ["--precision", "fp32"]
    assert _run(lens_cmd, argv) == 0
    reused = json.loads((again / "lens.json").read_text())["models"][0]
    assert reused["kl"] == pytest.approx(records[1]["kl"], rel=1e-6, abs=1e-9)
    assert "training a tuned lens" not in capsys.readouterr().err


def test_lens_verb_rejects_bad_budget(tmp_path, tiny_run, capsys) -> None:
    argv = [tiny_run, "--kind", "tuned", "--out", tmp_path, "--seq-len", 32]
    argv += ["--train-tokens-per-step", 40]
    assert _run(lens_cmd, argv) == 2
    assert "multiple of seq_len" in capsys.readouterr().err
    argv = [tiny_run, "--kind", "tuned", "--out", tmp_path, "--tuned-from", tmp_path / "none"]
    assert _run(lens_cmd, argv) == 2
    assert "lens.safetensors" in capsys.readouterr().err


def test_lens_and_probe_of_a_missing_model_write_nothing(tmp_path, capsys) -> None:
    """A spec that does not exist: one line, exit 2, and no output folder left behind."""
    from tying.commands import probe as probe_cmd

    for module in (lens_cmd, probe_cmd):
        out = tmp_path / f"out-{module.__name__}"
        assert _run(module, [tmp_path / "nope", "--out", out]) == 2
        assert "no such file or folder" in capsys.readouterr().err.splitlines()[-1]
        assert not out.exists()


def test_trace_verb_errors(tmp_path, tiny_run, capsys) -> None:
    argv = [tiny_run, "--prompt", "Hello", "--position", 99, "--out", tmp_path]
    assert _run(trace_cmd, argv) == 2
    assert "outside the prompt" in capsys.readouterr().err


def test_trace_verb(tmp_path, tiny_run, capsys) -> None:
    out = tmp_path / "trace"
    argv = [tiny_run, "--prompt", "The old man said that the", "--top-k", 3, "--out", out]
    assert _run(trace_cmd, argv) == 0
    text = capsys.readouterr().out
    table = [line for line in text.splitlines() if line.split(" ")[0] in {"emb", "1", "4"}]
    assert len(table) == 3
    record = json.loads((out / "trace.json").read_text())
    assert record["prompt"] == "The old man said that the"
    assert len(record["entries"]) == 5 and len(record["entries"][0]["input_tokens"]) == 3
    assert record["predicted"] == record["entries"][-1]["output_tokens"][0]
    assert (out / "trace.png").read_bytes()[:8] == PNG


def _fake_run(folder, shares):
    folder.mkdir(parents=True)
    rows = [
        {"step": i + 1, "loss": 5.0 - 0.01 * i, "grad_out_share": s} for i, s in enumerate(shares)
    ]
    rows.insert(3, {"step": 3, "val_loss": 4.0})
    rows.append({"step": len(shares), "event": "done", "grad_out_share": None})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_plot_verb(tmp_path, capsys) -> None:
    shares = [0.6 + 0.01 * (i % 7) for i in range(40)]
    _fake_run(tmp_path / "a", shares)
    _fake_run(tmp_path / "b", shares[::-1])
    out = tmp_path / "share.png"
    argv = [tmp_path / "a", tmp_path / "b", "--metric", "grad_out_share", "--rolling", 20]
    assert _run(plot_cmd, [*argv, "--out", out]) == 0
    assert out.read_bytes()[:8] == PNG
    series = json.loads((tmp_path / "share.json").read_text())  # beside the PNG
    assert [len(r["values"]) for r in series["runs"]] == [40, 40]
    assert series["runs"][0]["values"] == pytest.approx(shares)
    assert series["runs"][1]["rolling_mean"][-1] == pytest.approx(sum(shares[::-1][-20:]) / 20)
    printed = capsys.readouterr().out
    assert f"mean {sum(shares) / len(shares):.4g}" in printed
    assert f"wrote {out} and {tmp_path / 'share.json'}" in printed
    assert _run(plot_cmd, [*argv, "--out", out, "--json"]) == 0  # the same file, on stdout
    assert json.loads(capsys.readouterr().out) == series
    assert _run(plot_cmd, [tmp_path / "a", "--metric", "loss", "--max-step", 10]) == 0
    assert (tmp_path / "a" / "plot-loss.png").read_bytes()[:8] == PNG
    assert _run(plot_cmd, [tmp_path / "a", "--metric", "loss", "--ylim", 4, 5]) == 0
    assert _run(plot_cmd, [tmp_path / "a", "--metric", "loss", "--ylim", 5, 4]) == 2
    assert "LOW < HIGH" in capsys.readouterr().err
    assert _run(plot_cmd, [tmp_path / "a", "--metric", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no values of 'nope'" in err and "grad_out_share, loss, val_loss" in err


def test_rolling_mean_matches_naive_and_series_filters() -> None:
    values = [float(v) for v in [3, 1, 4, 1, 5, 9, 2, 6]]
    for window in (1, 3, 20):
        naive = [
            sum(values[max(0, i - window + 1) : i + 1])
            / len(values[max(0, i - window + 1) : i + 1])
            for i in range(len(values))
        ]
        assert rolling_mean(values, window) == pytest.approx(naive)
    rows = [
        {"step": 1, "m": 1.0},
        {"step": 2, "m": None},
        {"step": 3, "m": True},
        {"step": 4, "m": 2},
    ]
    assert metric_series(rows, "m") == ([1, 4], [1.0, 2.0])
    with pytest.raises(ValueError):
        rolling_mean(values, 0)
