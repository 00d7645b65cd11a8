"""`tying finetune` end to end on a tiny random Llama and on our decoder (TT and PIT runs): the
adapter folder, the loss against a plain forward pass, exact resume after a kill, the frozen or
trained interface, bad input (exit 2, nothing written)."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tying.adapters import ADAPTER_RECORD, INTERFACE_FILE, base_record, causal_lm_of
from tying.cli import main
from tying.evaluation.loading import load_for_evaluation
from tying.loader import load_any
from tying.update import FinetuneOptions, finetune
from tying.update.data import ExampleOrder, load_examples, tokenize_examples

#: The module (the package's `finetune` attribute is the function of the same name).
finetune_module = importlib.import_module("tying.update.finetune")

LLAMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def options(spec: Path, out: Path, **overrides) -> FinetuneOptions:
    """Small, exact settings: fp32, CPU, no progress bar."""
    settings = dict(
        spec=str(spec),
        task="mbpp",
        out=str(out),
        max_steps=3,
        batch_size=2,
        max_seq_len=128,
        precision="fp32",
        device="cpu",
        progress=False,
    )
    settings.update(overrides)
    return FinetuneOptions(**settings)


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def error_line(err: str, verb: str = "finetune") -> str:
    """The one error line of a failed verb: the last line of stderr, and the only one of ours
    (transformers' weight-loading bars may come before it)."""
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and err.rstrip("\n").splitlines()[-1] == lines[0], err
    assert lines[0].startswith(f"tying {verb}: error: ")
    return lines[0]


def reference_loss(spec: Path, batch_ids: list[tuple[list[int], int]]) -> float:
    """Mean cross-entropy of the answer tokens of a batch under the plain transformers model
    (float64 log-softmax of the full logits, one example at a time)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(spec).eval()
    total, count = 0.0, 0
    for ids, prompt in batch_ids:
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
        for t in range(max(prompt, 1), len(ids)):
            total -= float(logp[t - 1, ids[t]])
            count += 1
    return total / count


def test_three_steps_through_the_cli(tiny_base: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "adapter"
    argv = ["finetune", str(tiny_base), "--task", "mbpp", "--out", str(out), "--max-steps", "3"]
    argv += ["--batch-size", "2", "--max-seq-len", "128", "--precision", "fp32", "--no-progress"]
    assert main(argv) == 0
    assert "wrote the adapter" in capsys.readouterr().out
    names = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", ADAPTER_RECORD} <= names
    assert {"metrics.jsonl", "finetune.json", "checkpoints"} <= names
    assert INTERFACE_FILE not in names and not any(n.startswith(".") for n in names)
    rows = metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(math.isfinite(r["loss"]) and r["answer_tokens"] > 0 for r in rows)

    # the first step's loss: the base model's (B = 0), answer tokens only
    loaded = load_any(str(tiny_base))
    tok = loaded.tokenizer
    data = tokenize_examples(load_examples("mbpp"), tok.encode, 128, tok.eos_id)
    first = ExampleOrder(len(data.examples), seed=0).next_batch(2)
    batch = [(list(data.examples[i].ids), data.examples[i].prompt_tokens) for i in first]
    assert rows[0]["loss"] == pytest.approx(reference_loss(tiny_base, batch), rel=1e-5)
    assert rows[0]["answer_tokens"] == sum(len(ids) - p for ids, p in batch)

    # the adapter: LoRA A and B of the 7 projections of both blocks, B trained away from 0
    tensors = load_file(str(out / "adapter_model.safetensors"))
    assert len(tensors) == 2 * 2 * len(LLAMA_TARGETS)
    assert {k.split(".")[-3] for k in tensors} == set(LLAMA_TARGETS)
    assert any(float(v.abs().max()) > 0 for k, v in tensors.items() if "lora_B" in k)
    config = json.loads((out / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["lora_dropout"]) == (8, 16, 0.05)
    assert sorted(config["target_modules"]) == sorted(LLAMA_TARGETS)

    # the record names the base model and its fingerprint
    record = json.loads((out / ADAPTER_RECORD).read_text())
    expected = base_record(
        causal_lm_of(loaded.model), spec=str(tiny_base), name=loaded.name, kind=loaded.kind
    )
    assert record["base"] == expected
    assert (record["base"]["tie"], record["base"]["vocab_size"], record["base"]["d_model"]) == (
        "tt",
        1024,
        32,
    )
    assert record["lora"]["target_modules"] == LLAMA_TARGETS and record["steps"] == 3
    summary = json.loads((out / "finetune.json").read_text())
    assert summary["steps"] == 3 and summary["data"]["items"] == len(data.examples)
    assert summary["seconds_per_step"] > 0


def test_killed_run_resumes_with_identical_losses(
    tiny_base: Path, tmp_path: Path, monkeypatch
) -> None:
    settings = dict(max_steps=6, checkpoint_every=2, dropout=0.3, lr=1e-2, seed=5)
    whole = tmp_path / "whole"
    finetune(options(tiny_base, whole, **settings))

    killed = tmp_path / "killed"
    real_collate, calls = finetune_module.collate, []

    def dying_collate(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:  # step 5 starts: after the checkpoint of step 4
            raise KeyboardInterrupt
        return real_collate(*args, **kwargs)

    monkeypatch.setattr(finetune_module, "collate", dying_collate)
    with pytest.raises(KeyboardInterrupt):
        finetune(options(tiny_base, killed, **settings))
    monkeypatch.setattr(finetune_module, "collate", real_collate)
    assert not (killed / "adapter_model.safetensors").exists()
    finetune(options(tiny_base, killed, resume=True, **settings))

    a, b = metrics(whole), metrics(killed)
    assert [r["step"] for r in b] == [1, 2, 3, 4, 5, 6]
    for key in ("loss", "grad_norm", "lr", "tokens"):
        assert [r[key] for r in a] == [r[key] for r in b], key
    assert len({r["loss"] for r in a}) > 1
    tensors_a = load_file(str(whole / "adapter_model.safetensors"))
    tensors_b = load_file(str(killed / "adapter_model.safetensors"))
    assert tensors_a.keys() == tensors_b.keys()
    assert all(torch.equal(tensors_a[k], tensors_b[k]) for k in tensors_a)


def test_resume_refuses_other_settings(tiny_base: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    finetune(options(tiny_base, out, max_steps=1))
    capsys.readouterr()
    argv = ["finetune", str(tiny_base), "--out", str(out), "--max-steps", "2", "--no-progress"]
    argv += ["--batch-size", "2", "--max-seq-len", "128"]
    assert main([*argv, "--resume", "--rank", "4"]) == 2
    assert error_line(capsys.readouterr().err).endswith(
        "it was trained with rank=8, this run asks for rank=4; resume with the same setting, or "
        "choose another output folder"
    )
    assert main(argv) == 2  # a used folder without --resume
    assert error_line(capsys.readouterr().err).endswith(
        "pass --resume to continue it, or choose another output folder (nothing was overwritten)"
    )


def test_an_old_checkpoint_is_refused_with_one_line(
    tiny_base: Path, tmp_path: Path, capsys
) -> None:
    """tying 0.2.0's finetune saved `optimizer.state_dict()` (parameters by index): a resume
    refuses it by name instead of failing inside torch.distributed.checkpoint."""
    out = tmp_path / "run"
    finetune(options(tiny_base, out, max_steps=2, checkpoint_every=1))
    path = out / "checkpoints" / "step-0000002" / "optimizer.pt"
    state = torch.load(path, weights_only=True)
    names = [n for g in state["param_groups"] for n in g["params"]]
    old = {
        "state": {names.index(n): v for n, v in state["state"].items()},
        "param_groups": [{**state["param_groups"][0], "params": list(range(len(names)))}],
    }
    torch.save(old, path)
    capsys.readouterr()
    argv = ["finetune", str(tiny_base), "--out", str(out), "--max-steps", "3", "--resume"]
    argv += ["--batch-size", "2", "--max-seq-len", "128", "--no-progress", "--device", "cpu"]
    assert main(argv) == 2
    assert "written by an older tying finetune" in error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("unknown task", "unknown task 'mbpp2'"),
        ("missing file", "not found"),
        ("malformed file", "not valid JSON"),
        ("no tokenizer", "has no tokenizer"),
        ("negative steps", "max_steps must be >= 0"),
        ("bad target", "no module of the model is called 'qkv'"),
        ("non-linear target", "not a linear layer"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(
    case: str, message: str, tiny_base: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "out"
    spec, extra = str(tiny_base), []
    task = "mbpp"
    if case == "unknown task":
        task = "mbpp2"
    elif case == "missing file":
        task = str(tmp_path / "none.jsonl")
    elif case == "malformed file":
        (tmp_path / "bad.jsonl").write_text('{"prompt": "a", "completion": "b"}\n{"prompt"\n')
        task = str(tmp_path / "bad.jsonl")
    elif case == "no tokenizer":
        from transformers import AutoModelForCausalLM

        AutoModelForCausalLM.from_pretrained(tiny_base).save_pretrained(tmp_path / "bare")
        spec = str(tmp_path / "bare")
    elif case == "negative steps":
        extra = ["--max-steps", "-1"]
    elif case == "bad target":
        extra = ["--target-modules", "q_proj", "qkv"]
    else:
        extra = ["--target-modules", "input_layernorm"]
    code = main(["finetune", spec, "--task", task, "--out", str(out), "--no-progress", *extra])
    assert code == 2
    assert message in error_line(capsys.readouterr().err)
    assert not out.exists()


def test_zero_steps_leave_the_model_unchanged(tiny_base: Path, tmp_path: Path) -> None:
    out = tmp_path / "zero"
    finetune(options(tiny_base, out, max_steps=0))
    tensors = load_file(str(out / "adapter_model.safetensors"))
    assert all(float(v.abs().max()) == 0 for k, v in tensors.items() if "lora_B" in k)
    ids = torch.tensor([[5, 17, 300, 2, 99, 1000]])
    base = load_for_evaluation(str(tiny_base))
    adapted = load_for_evaluation(str(tiny_base), adapter=str(out))
    with torch.no_grad():
        assert torch.equal(base.model(ids).logits, adapted.model(ids).logits)


@pytest.mark.parametrize("tie", ["tt", "pit"])
def test_our_decoder_frozen_interface(tie: str, decoder_runs, qa_file: Path, tmp_path) -> None:
    run = decoder_runs[tie]
    out = tmp_path / "adapter"
    result = finetune(options(run, out, task=str(qa_file), max_steps=2, batch_size=4))
    assert result.steps == 2
    record = json.loads((out / ADAPTER_RECORD).read_text())
    assert record["base"]["tie"] == tie and record["base"]["model_class"] == "TyingForCausalLM"
    assert record["lora"]["target_modules"] == LLAMA_TARGETS
    assert record["interface_tensors"] == [] and not (out / INTERFACE_FILE).exists()
    base = load_any(str(run))
    adapted = load_for_evaluation(str(run), adapter=str(out))
    interface = adapted.model.get_input_embeddings()
    for name, tensor in base.interface.state_dict().items():
        assert torch.equal(tensor, interface.state_dict()[name]), name
    ids = torch.tensor([[3, 50, 7, 200]])
    with torch.no_grad():
        assert not torch.equal(base.model(ids), adapted.model(ids).logits)


@pytest.mark.parametrize(("tie", "trained"), [("tt", ["weight"]), ("pit", ["l_param"])])
def test_our_decoder_trained_interface(
    tie: str, trained: list[str], decoder_runs, qa_file: Path, tmp_path
) -> None:
    run = decoder_runs[tie]
    out = tmp_path / "adapter"
    finetune(options(run, out, task=str(qa_file), max_steps=2, lr=1e-2, train_interface=True))
    record = json.loads((out / ADAPTER_RECORD).read_text())
    assert record["interface_tensors"] == trained and record["train_interface"] is True
    saved = load_file(str(out / INTERFACE_FILE))
    assert sorted(saved) == trained
    base = load_any(str(run))
    before = base.interface.state_dict()
    assert not torch.equal(saved[trained[0]], before[trained[0]])  # it trained
    adapted = load_for_evaluation(str(run), adapter=str(out))
    interface = adapted.model.get_input_embeddings()
    after = interface.state_dict()
    assert torch.equal(after[trained[0]], saved[trained[0]])  # applied with the adapter
    if tie == "pit":  # Z did not move: still orthonormal, and W_out E = I_d holds
        assert torch.equal(after["z"], before["z"])
        E, U = interface.analysis_matrices()  # float64 from the float32 Z and L
        eye = torch.eye(E.shape[1], dtype=E.dtype)
        assert float((U.T @ E - eye).abs().max()) < 1e-4  # float32 rounding of Z only
