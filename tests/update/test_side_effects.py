"""`tying side-effects`: a model against itself and under an untrained adapter changes nothing
(KL exactly 0, equal losses, full agreement, no lens change, equal interface metrics, same task
answers); a trained adapter's KL against a naive full-logit computation; the interface metrics
do not move when the interface is frozen and do when it trains; bad input exits 2 and writes
nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tying.cli import main
from tying.evaluation.side_effects import SIDE_EFFECTS_FILE, SideEffectsOptions, run_side_effects
from tying.paths import data_dir
from tying.update import finetune

from .test_finetune import error_line, options

TEXT_KEYS = {"kl_nats", "delta_loss", "top1_agreement", "tokens"}


@pytest.fixture(scope="module")
def wiki(tmp_path_factory) -> Path:
    """The first 20,000 characters of WikiText-2 test, as a small text file."""
    path = tmp_path_factory.mktemp("texts") / "wiki.txt"
    source = data_dir() / "corpus" / "wikitext-2" / "test.txt"
    path.write_text(source.read_text(encoding="utf-8")[:20_000], encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def adapters(tiny_base: Path, tmp_path_factory) -> dict[str, Path]:
    """An untrained adapter (0 steps, B = 0) and one trained for 3 steps at a high rate."""
    root = tmp_path_factory.mktemp("side-adapters")
    finetune(options(tiny_base, root / "zero", max_steps=0))
    finetune(options(tiny_base, root / "trained", max_steps=3, lr=2e-2))
    return {"zero": root / "zero", "trained": root / "trained"}


def side(base: Path, updated: Path, out: Path, text: Path, **overrides) -> dict:
    settings = dict(
        base=str(base),
        updated=str(updated),
        out=str(out),
        texts=[str(text)],
        max_tokens=512,
        lens_tokens=256,
        seq_len=128,
        batch_size=2,
        vocab_chunk=100,
        bootstrap_resamples=200,
        precision="fp32",
        device="cpu",
        progress=False,
    )
    settings.update(overrides)
    report = run_side_effects(SideEffectsOptions(**settings)).report
    assert json.loads((out / SIDE_EFFECTS_FILE).read_text()) == report
    return report


def assert_nothing_changed(report: dict) -> None:
    for entry in report["texts"].values():
        assert entry["kl_nats"] == 0.0 and entry["delta_loss"] == 0.0
        assert entry["top1_agreement"] == 1.0 and entry["tokens"] == 512
        assert entry["loss_base"] == entry["loss_updated"] > 0
    assert report["lens_kl_change"] == [0.0, 0.0, 0.0]
    assert report["interface"]["before"] == report["interface"]["after"]
    assert report["interface_change"] == dict.fromkeys(
        ("E_rel_change", "E_old_rel_change", "U_rel_change", "U_old_rel_change"), 0.0
    )


def test_a_model_against_itself(tiny_base: Path, wiki: Path, tmp_path: Path) -> None:
    report = side(tiny_base, tiny_base, tmp_path / "self", wiki)
    assert {"texts", "lens_kl_change", "interface"} <= set(report)
    assert set(report["texts"]) == {"wiki"} and TEXT_KEYS <= set(report["texts"]["wiki"])
    assert set(report["interface"]) == {"before", "after"}
    assert set(report["interface"]["before"]) == {"raw", "effective"}
    assert_nothing_changed(report)


def test_an_untrained_adapter_changes_nothing(
    tiny_base: Path, adapters: dict[str, Path], wiki: Path, tmp_path: Path
) -> None:
    out = tmp_path / "zero"
    report = side(
        tiny_base,
        tiny_base,
        out,
        wiki,
        adapter=str(adapters["zero"]),
        tasks=["gsm8k"],
        limit=3,
        max_new_tokens=4,
        num_fewshot=0,
    )
    assert_nothing_changed(report)
    task = report["cross_task"]["gsm8k"]
    assert task["n"] == 3 and task["delta_accuracy"] == 0.0
    assert task["mcnemar"] == {"only_base": 0, "only_updated": 0, "p_value": 1.0}
    assert task["delta_ref_loglik_per_token"] == 0.0
    assert task["ref_loglik_bootstrap"]["ci95"] == [0.0, 0.0]
    for key in ("base", "updated"):
        results = json.loads((out / f"eval-{key}" / "results.json").read_text())
        assert results["tasks"]["gsm8k"]["accuracy"] == task[key]["accuracy"]
    assert json.loads((out / "eval-updated" / "results.json").read_text())["run"]["adapter"] == str(
        adapters["zero"]
    )


def naive_window_kl(base: Path, adapter: Path, ids: list[int]) -> float:
    """Mean KL(base ‖ base + adapter) over the positions of one window, from the full logits of
    plain transformers and peft models (float64 log-softmax)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(base).eval()
    with torch.no_grad():
        lp = torch.log_softmax(plain(torch.tensor([ids])).logits[0].double(), -1)
    updated = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).eval()
    with torch.no_grad():
        lq = torch.log_softmax(updated(torch.tensor([ids])).logits[0].double(), -1)
    return float((lp.exp() * (lp - lq)).sum(-1).mean())


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing`:FutureWarning")  # peft itself
def test_a_trained_adapter(
    tiny_base: Path, adapters: dict[str, Path], wiki: Path, tmp_path
) -> None:
    from tying.data.corpus import prepare_store
    from tying.loader import load_any

    report = side(
        tiny_base, tiny_base, tmp_path / "trained", wiki, adapter=str(adapters["trained"])
    )
    entry = report["texts"]["wiki"]
    assert entry["kl_nats"] > 0 and entry["top1_agreement"] <= 1.0
    assert entry["windows"] == 4 and len(entry["per_window"]["kl_nats"]) == 4
    lo, hi = entry["kl_nats_ci95"]
    assert lo <= entry["kl_nats"] <= hi
    assert entry["delta_loss"] == pytest.approx(entry["loss_updated"] - entry["loss_base"])
    store = prepare_store(wiki, load_any(str(tiny_base)).tokenizer, progress=False)
    first = store.slice(0, 128).tolist()
    expected = naive_window_kl(tiny_base, adapters["trained"], first)
    assert entry["per_window"]["kl_nats"][0] == pytest.approx(expected, rel=1e-3, abs=1e-7)
    change = report["lens_kl_change"]
    assert len(change) == 3 and change[-1] == 0.0 and any(v != 0 for v in change)
    # LoRA leaves the token interface alone: its metrics do not move
    assert report["interface"]["before"] == report["interface"]["after"]


def test_pit_decoder_interface_frozen_then_trained(
    decoder_runs, qa_file: Path, wiki: Path, tmp_path: Path
) -> None:
    run = decoder_runs["pit"]
    finetune(options(run, tmp_path / "frozen", task=str(qa_file), max_steps=2, lr=1e-2))
    frozen = side(
        run,
        run,
        tmp_path / "se-frozen",
        wiki,
        adapter=str(tmp_path / "frozen"),
        seq_len=32,
        max_tokens=128,
        lens_tokens=64,
    )
    assert frozen["texts"]["wiki"]["kl_nats"] > 0
    assert frozen["interface"]["before"] == frozen["interface"]["after"]
    assert frozen["interface_change"] == dict.fromkeys(
        ("E_rel_change", "E_old_rel_change", "U_rel_change", "U_old_rel_change"), 0.0
    )
    finetune(
        options(
            run, tmp_path / "trained", task=str(qa_file), max_steps=2, lr=1e-2, train_interface=True
        )
    )
    trained = side(
        run,
        run,
        tmp_path / "se-trained",
        wiki,
        adapter=str(tmp_path / "trained"),
        seq_len=32,
        max_tokens=128,
        lens_tokens=64,
    )
    assert trained["interface_change"]["E_rel_change"] > 0
    assert trained["interface"]["before"] != trained["interface"]["after"]
    # PIT keeps W_out E = I whatever L is: the raw consistency stays at zero
    assert trained["interface"]["after"]["raw"]["delta_ti"] < 1e-4


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("foreign adapter", "another base model"),
        ("missing text", "not found"),
        ("other tokenizer", "do not share a tokenizer"),
        ("limit 0", "limit must be a positive number"),
        ("unknown task", "unknown task 'gsm9k'"),
        ("no tokenizer", "has no tokenizer"),
        ("not empty", "is not empty"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(
    case: str, message: str, tiny_base: Path, adapters, wiki: Path, tmp_path: Path, capsys
) -> None:
    from ..evaluation._harness_models import save_tiny_model, train_tokenizer

    out = tmp_path / "out"
    base = updated = str(tiny_base)
    extra = ["--texts", str(wiki), "--max-tokens", "256", "--seq-len", "128", "--no-progress"]
    if case == "foreign adapter":
        other = save_tiny_model(tmp_path / "other", train_tokenizer(), seed=1)
        updated, extra = str(other), [*extra, "--adapter", str(adapters["trained"])]
    elif case == "missing text":
        extra = [*extra, "--texts", str(tmp_path / "none.txt")]
    elif case == "other tokenizer":
        updated = str(save_tiny_model(tmp_path / "other", train_tokenizer(512)))
    elif case == "limit 0":
        extra = [*extra, "--tasks", "gsm8k", "--limit", "0"]
    elif case == "unknown task":
        extra = [*extra, "--tasks", "gsm8k,gsm9k"]
    elif case == "no tokenizer":
        from transformers import AutoModelForCausalLM

        AutoModelForCausalLM.from_pretrained(tiny_base).save_pretrained(tmp_path / "bare")
        updated = str(tmp_path / "bare")
    else:
        out.mkdir()
        (out / "keep.txt").write_text("mine")
    code = main(["side-effects", base, updated, "--out", str(out), *extra])
    assert code == 2
    assert message in error_line(capsys.readouterr().err, "side-effects")
    if case == "not empty":
        assert [p.name for p in out.iterdir()] == ["keep.txt"]
    else:
        assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def fake_results(correct: list[bool], loglik: list[float], tokens: list[int]) -> dict:
    """A results.json with one task, gsm8k, of the given items."""
    items = [
        {"id": f"gsm8k/test/{i}", "correct": c, "ref_loglik": ll, "ref_tokens": n}
        for i, (c, ll, n) in enumerate(zip(correct, loglik, tokens))
    ]
    k = sum(correct)
    return {
        "tasks": {
            "gsm8k": {
                "n": len(items),
                "accuracy": k / len(items),
                "ci95": [0.0, 1.0],
                "ref_loglik_per_token": sum(loglik) / sum(tokens),
                "items": items,
            }
        }
    }


def test_compare_results_by_hand() -> None:
    from tying.evaluation.side_effects import compare_results

    base = fake_results([True, False, False, True], [-10.0, -20.0, -6.0, -4.0], [10, 10, 2, 4])
    updated = fake_results([True, True, True, False], [-5.0, -20.0, -6.0, -8.0], [10, 10, 2, 4])
    task = compare_results(base, updated, n_resamples=500)["gsm8k"]
    assert task["delta_accuracy"] == 0.75 - 0.5
    # items 2, 3 only the updated model got right, item 4 only the base: p = 2·P[X <= 1], X ~ Bin(3, 1/2)
    assert task["mcnemar"] == {"only_base": 1, "only_updated": 2, "p_value": 1.0}
    assert task["delta_ref_loglik_per_token"] == pytest.approx(-39 / 26 - (-40 / 26))
    # per-item log-likelihood per token: base -1, -2, -3, -1; updated -0.5, -2, -3, -2
    assert task["ref_loglik_bootstrap"]["mean_item_difference"] == pytest.approx(-0.5 / 4)
    other = fake_results([True] * 3, [-1.0] * 3, [1] * 3)
    with pytest.raises(ValueError, match="different items"):
        compare_results(base, other)
    with pytest.raises(ValueError, match="base model only"):
        compare_results(base, {"tasks": {}})
