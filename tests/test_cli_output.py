"""One rule of output for every verb (issue 38 item 5, `tying.commands.report`): a few human
lines on stdout (not JSON), the JSON in the verb's output folder, and `--json` printing exactly
that JSON (nothing else on stdout).

The real verbs that run in seconds (train, eval, tokenize, params, info, plot) run for real;
the verbs that load a real model or run a grid (convert, export, lens, trace, probe, evaluate,
side-effects, finetune, add-tokens, experiment, demo) run with their library function replaced
by one that writes a known result: what is tested there is the verb's wiring (which file its
JSON is, what `--json` prints), the library's own tests cover the numbers.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tying.cli import VERBS, build_parser, main
from tying.commands import report

from .conftest import as_overrides, tiny_train_settings


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def _both(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, Any]:
    """(the human stdout, the parsed `--json` stdout) of one verb run twice (the second time
    with --overwrite when the verb has an output folder to replace)."""
    assert main(argv) == 0
    human = capsys.readouterr().out
    again = [*argv, "--json"]
    if "--overwrite" in build_parser(argv[0]).format_help() and "--out" in argv:
        again.append("--overwrite")
    assert main(again) == 0
    printed = capsys.readouterr().out
    return human, json.loads(printed)


# ---------------------------------------------------------------------------- the helper
def test_report_writes_the_json_and_prints_the_summary(tmp_path: Path, capsys) -> None:
    path = tmp_path / "x.json"
    data = {"loss": 1.5, "tokens": 3, "nested": {"a": [1, 2]}}
    report(types.SimpleNamespace(json=False), ["did it: 3 tokens"], data, path)
    assert json.loads(path.read_text()) == data
    assert capsys.readouterr().out == f"did it: 3 tokens\nwrote {path}\n"
    report(types.SimpleNamespace(json=True), ["did it"], data, path)
    assert json.loads(capsys.readouterr().out) == data
    # data=None: the file the library wrote is the JSON; a line naming it is not repeated
    report(types.SimpleNamespace(json=False), f"wrote {path} (1 s)", None, path)
    assert capsys.readouterr().out == f"wrote {path} (1 s)\n"
    report(types.SimpleNamespace(json=True), "ignored", None, path)
    assert json.loads(capsys.readouterr().out) == data
    # no output file: --json is the only JSON
    report(types.SimpleNamespace(json=False), ["a", "b"], data)
    assert capsys.readouterr().out == "a\nb\n"


def test_every_verb_has_the_json_flag() -> None:
    for verb in VERBS:
        action = {a.dest: a for a in build_parser(verb)._actions}["json"]
        assert action.option_strings == ["--json"] and action.const is True, verb


# ----------------------------------------------------------------- verbs that run for real
def test_params_and_info(capsys) -> None:
    human, data = _both(["params", "small", "--vocab", "32000", "--tie", "pit"], capsys)
    assert not _is_json(human) and "embedding share" in human
    assert data["total"] == int(human.split("total")[1].split()[0].replace(",", ""))
    human, data = _both(["info"], capsys)
    assert not _is_json(human) and data["tying"] in human


def test_tokenize(small_corpus, tmp_path: Path, capsys) -> None:
    shards = tmp_path / "shards"
    tok = str(small_corpus["tokenizer"])
    argv = ["tokenize", str(small_corpus["val"]), "--out", str(shards), "--tokenizer", tok]
    human, data = _both([*argv, "--no-progress"], capsys)
    assert not _is_json(human) and f"{data['tokens']:,} tokens" in human
    assert data["folder"] == str(shards) and str(shards) in human


@pytest.mark.slow
def test_train_and_eval(small_corpus, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    argv = ["train", *as_overrides(tiny_train_settings(small_corpus, run, max_steps=2))]
    assert main(argv) == 0
    human = capsys.readouterr().out
    written = json.loads((run / "train.json").read_text())
    assert not _is_json(human) and f"trained {written['steps']} steps" in human
    assert str(run) in human and written["steps"] == 2
    assert main([*argv, "resume=true", "max_steps=3", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((run / "train.json").read_text()) and printed["steps"] == 3
    assert set(printed) == {"run_dir", "steps", "tokens", "final_loss", "val_loss", "elapsed_s"}

    human, data = _both(
        ["eval", str(run), "--data", str(small_corpus["val"]), "--max-tokens", "64"], capsys
    )
    assert not _is_json(human) and f"loss {data['loss']:.4f} nats/token" in human
    assert set(data) >= {"spec", "checkpoint", "data", "loss", "ppl", "tokens", "finite"}


# --------------------------------------------------- verbs with their library replaced
def _write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


RECORD = {"answer": 42, "rows": [{"a": 1.5}], "text": "ü"}


def _fake_lens(out: Path) -> Callable[..., Any]:
    def run_lens(options):
        return types.SimpleNamespace(
            json_path=_write(Path(options.out) / "lens.json", RECORD),
            plot_path=Path(options.out) / "lens.png",
            device="cpu",
            precision="fp32",
        )

    return run_lens


def _cases(tmp_path: Path) -> list[tuple[str, list[str], str, str, Callable[..., Any], Path]]:
    """(verb, argv, module, function, fake, the JSON file the verb should print)."""
    out = tmp_path / "out"
    spec = tmp_path / "model"
    spec.mkdir(parents=True, exist_ok=True)
    ns = types.SimpleNamespace

    def trace(options):
        return ns(
            table="emb  a  b",
            json_path=_write(Path(options.out) / "trace.json", RECORD),
            plot_path=Path(options.out) / "trace.png",
        )

    def probe(options):
        return ns(
            report={"timings_s": {"total": 1.0}},
            json_path=_write(Path(options.out) / "probe.json", RECORD),
            markdown_path=out / "probe.md",
            html_path=out / "probe.html",
            plots={},
            errors=[],
        )

    def evaluate(options):
        _write(Path(options.out) / "results.json", RECORD)
        task = {"ci95": [0.1, 0.3], "ref_loglik_per_token": None, "accuracy": 0.2, "n": 10}
        return {"tasks": {"gsm8k": task}}

    def side_effects(options):
        text = {"kl_nats": 0.012, "delta_loss": -0.5, "top1_agreement": 0.9, "tokens": 256}
        report = {**RECORD, "texts": {"wikitext-2": text}}
        return ns(report=report, json_path=_write(Path(options.out) / "side_effects.json", report))

    def train_grid(cfg, progress=True):
        spec = ns(name="tt-s0")
        return [ns(spec=spec, run_dir=out / "tt-s0", state="new", result={"steps": 2})]

    def demo(cfg, progress=True):
        return ns(json_path=_write(Path(cfg.out) / "report.json", RECORD))

    def finetune(options):
        _write(Path(options.out) / "finetune.json", RECORD)
        return ns(out=Path(options.out), steps=2, final_loss=1.0, seconds_per_step=0.5)

    def add_tokens(options, log=None):
        record = {**RECORD, "out": options.out, "ids": {"<x>": 7}, "old_text": None}
        record["vocab_size"] = {"before": 7, "after": 8}
        _write(Path(options.out) / "add_tokens.json", record)
        return ns(out=Path(options.out), ids={"<x>": 7}, record=record)

    conversion = {"family": "llama", "vocab_rows": 8, "d_model": 4, "tie": "pit", "step0": None}

    def convert(options):
        Path(options.out).mkdir(parents=True)
        return {"out": str(options.out), "report": conversion}

    def export(options):
        Path(options.out).mkdir(parents=True)
        return {"out": options.out, "tie": "tt", "tie_word_embeddings": True, "tokenizer": True}

    def train(cfg):
        summary = {"run_dir": cfg.out, "steps": 2, "tokens": 256, "final_loss": 6.1}
        summary.update(val_loss=None, elapsed_s=1.0)
        Path(cfg.out).mkdir(parents=True)
        return ns(summary=lambda: summary)

    def evaluate_text(options):
        return {**RECORD, "spec": options.spec, "checkpoint": None, "data": "t.txt", "loss": 1.0,
                "ppl": 2.72, "tokens": 64, "finite": True, "precision": "fp32"}  # fmt: skip

    def updates_only(cfg, progress=True, shard=None):
        return _write(out / "updates.json", RECORD)

    tokens = tmp_path / "new.txt"
    tokens.write_text("<x>\n")
    return [
        ("train", ["max_steps=2"], "tying.train", "train", train, out / "train.json"),
        ("eval", [str(spec)], "tying.evaluation.text_loss", "evaluate_text", evaluate_text, None),
        ("lens", [str(spec)], "tying.lens.pipeline", "run_lens", _fake_lens(out), out / "lens.json"),
        ("trace", [str(spec), "--prompt", "Hi"], "tying.lens.pipeline", "run_trace", trace, out / "trace.json"),
        ("probe", [str(spec)], "tying.probe", "run_probe", probe, out / "probe.json"),
        ("evaluate", [str(spec), "--tasks", "gsm8k"], "tying.evaluation.evaluate", "evaluate_model", evaluate, out / "results.json"),
        ("side-effects", [str(spec), str(spec)], "tying.evaluation.side_effects", "run_side_effects", side_effects, out / "side_effects.json"),
        ("finetune", [str(spec), "--task", "mbpp"], "tying.update", "finetune", finetune, out / "finetune.json"),
        ("add-tokens", [str(spec), "--tokens", str(tokens)], "tying.update", "add_tokens", add_tokens, out / "add_tokens.json"),
        ("convert", [str(spec), "--tie", "pit"], "tying.teacher.conversion", "convert_to_folder", convert, out / "convert.json"),
        ("export", [str(spec)], "tying.teacher.conversion", "export_to_folder", export, out / "export.json"),
        ("experiment", ["configs/experiments/updates.yaml", "--updates-only"], "tying.experiment", "run_updates_only", updates_only, out / "updates.json"),
        ("experiment-train-only", ["configs/experiments/cpu.yaml", "--train-only"], "tying.experiment", "run_grid", train_grid, None),
        ("demo", [], "tying.experiment.demo", "run_demo", demo, out / "report.json"),
    ]  # fmt: skip


CASES = ["train", "eval", "lens", "trace", "probe", "evaluate", "side-effects", "finetune", "add-tokens",
         "convert", "export", "experiment", "experiment-train-only", "demo"]  # fmt: skip


@pytest.mark.parametrize("verb", CASES)
def test_a_verb_prints_a_summary_or_exactly_its_json(
    verb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import importlib
    import shutil

    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # configs/ of the repository
    (name, argv, module, function, fake, path) = next(c for c in _cases(tmp_path) if c[0] == verb)
    monkeypatch.setattr(importlib.import_module(module), function, fake)
    name = name.split("-train-only")[0]
    if name == "demo":  # its table reads a real report
        monkeypatch.setattr(importlib.import_module(module), "demo_summary", lambda r: "a table")
    if path is None:  # no file of its own: the JSON only on stdout, with --json
        if name == "experiment":
            argv = [*argv, "--out", str(tmp_path / "out")]
        assert main([name, *argv]) == 0
        human = capsys.readouterr().out
        assert not _is_json(human) and human.strip()
        assert main([name, *argv, "--json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed.get("answer") == 42 or printed["runs"][0]["name"] == "tt-s0"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "new.txt"]  # none written
        return
    argv = [name, *argv, "--out", str(path.parent)]
    assert main(argv) == 0
    human = capsys.readouterr().out
    assert not _is_json(human) and str(path) in human, human
    assert path.is_file()
    shutil.rmtree(path.parent)
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(path.read_text())


def test_the_json_file_a_verb_writes_holds_the_old_keys(tmp_path, monkeypatch, capsys) -> None:
    """convert's and export's stdout JSON of 0.1 ({"out", "report"}; {"out", "tie", ...}) is
    now their file's, key for key; add-tokens' ("out", "ids", "old_text") is in its record."""
    import importlib

    for verb in ("convert", "export"):
        (name, argv, module, function, fake, path) = next(
            c for c in _cases(tmp_path / verb) if c[0] == verb
        )
        monkeypatch.setattr(importlib.import_module(module), function, fake)
        assert main([name, *argv, "--out", str(path.parent), "--json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed == json.loads(path.read_text())
        assert set(printed) == (
            {"out", "report"} if verb == "convert" else {"out", "tie", "tie_word_embeddings", "tokenizer"}
        )  # fmt: skip


def test_top_help_tells_eval_and_evaluate_apart() -> None:
    """`tying --help` alone says which verb is the loss on a text and which the benchmark
    tasks (issue 38 item 5), each pointing to the other."""
    from tying.cli import top_help

    lines = {line.split()[0]: line for line in top_help().splitlines() if line.startswith("  ")}
    assert lines["eval"].split(None, 1)[1].startswith("loss on a text: loss and perplexity")
    assert lines["evaluate"].split(None, 1)[1].startswith("benchmark tasks: GSM8K")
    assert "(benchmark tasks: evaluate)" in lines["eval"]
    assert "(loss on a text: eval)" in lines["evaluate"]
