"""`evaluate_model` end to end through lm-eval on a tiny random Llama: results.json schema and
values (seeded subset, accuracy, Wilson interval, reference log-likelihood against a plain
forward pass), a generator that answers with the references scores 1.0 on every task, bad input
fails before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import tying.evaluation.harness as harness
from tying.evaluation.evaluate import RESULTS_FILE, EvaluateOptions, evaluate_model
from tying.evaluation.stats import wilson_interval
from tying.evaluation.tasks import TASKS, load_task, seeded_subset

from ._harness_models import eval_model_dir, save_tiny_model, train_tokenizer  # noqa: F401

ITEM_KEYS = {"id", "correct", "completion", "ref_loglik", "ref_tokens"}


def reference_loglik(model, tok, prompt: str, target: str) -> tuple[float, int]:
    """log p(target | prompt) (nats) and its token count, by a plain forward pass of a
    transformers model and a `tokenizers.Tokenizer`; the prompt's trailing whitespace moves to
    the target and the target's tokens are those of prompt + target after the prompt's own
    (lm-eval's convention)."""
    context = prompt.rstrip()
    continuation = prompt[len(context) :] + target
    whole = tok.encode(context + continuation).ids
    n_context = len(tok.encode(context).ids)
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([whole])).logits[0].double(), -1)
    picked = [logp[t - 1, whole[t]] for t in range(n_context, len(whole))]
    return float(sum(picked)), len(whole) - n_context


def test_limit_3_through_lm_eval(eval_model_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "eval"
    options = EvaluateOptions(
        spec=str(eval_model_dir),
        out=out,
        limit=3,
        seed=7,
        max_new_tokens=4,
        num_fewshot=0,
        precision="fp32",  # compared with a float32 forward pass below (auto may be bf16)
    )
    results = evaluate_model(options)
    assert json.loads((out / RESULTS_FILE).read_text()) == results
    assert [p.name for p in out.iterdir()] == [RESULTS_FILE]  # no temporary file left
    assert results["model"] == str(eval_model_dir)
    assert list(results["tasks"]) == list(TASKS)
    assert results["run"]["lm_eval_version"].startswith("0.4.")
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    tok = Tokenizer.from_file(str(eval_model_dir / "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(eval_model_dir).eval()
    for task, entry in results["tasks"].items():
        expected = seeded_subset(load_task(task), 3, seed=7)
        items = entry["items"]
        assert entry["n"] == 3 == len(items)
        assert [i["id"] for i in items] == [item.id for item in expected]
        assert all(ITEM_KEYS <= set(i) and isinstance(i["correct"], bool) for i in items)
        k = sum(i["correct"] for i in items)
        assert entry["accuracy"] == k / 3
        lo, hi = entry["ci95"]
        assert (lo, hi) == pytest.approx(wilson_interval(k, 3))
        assert lo <= entry["accuracy"] <= hi
        # the reference log-likelihood, item by item, against a plain forward pass
        total_ll = total_n = 0
        for item, record in zip(expected, items, strict=True):
            ll, n = reference_loglik(model, tok, item.prompt, item.target)
            assert record["ref_tokens"] == n
            assert record["ref_loglik"] == pytest.approx(ll, abs=1e-3, rel=1e-5)
            total_ll, total_n = total_ll + ll, total_n + n
        assert entry["ref_loglik_per_token"] == pytest.approx(total_ll / total_n, abs=1e-4)
        assert entry["truncated_prompts"] == {"generate": 0, "reference": 0}


def test_likelihood_only_scores_the_same_references_and_generates_nothing(
    eval_model_dir: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch,
) -> None:
    common = dict(
        spec=str(eval_model_dir),
        tasks=["gsm8k", "humaneval"],  # one answer-scored and one sandbox-scored task
        limit=3,
        seed=7,
        num_fewshot=0,
        precision="fp32",
    )
    full = evaluate_model(EvaluateOptions(out=tmp_path / "full", max_new_tokens=4, **common))

    def no_generation(*args, **kwargs):
        raise AssertionError("a likelihood-only evaluation generated")

    monkeypatch.setattr(harness, "greedy_generate", no_generation)
    only = evaluate_model(EvaluateOptions(out=tmp_path / "only", generate=False, **common))
    assert list(only["tasks"]) == ["gsm8k", "humaneval"]
    for task, entry in only["tasks"].items():
        assert entry["accuracy"] is None and entry["ci95"] is None
        assert entry["seconds"]["generate"] == 0.0
        reference = full["tasks"][task]
        assert entry["ref_loglik_per_token"] == reference["ref_loglik_per_token"]
        assert [(i["id"], i["ref_loglik"], i["ref_tokens"]) for i in entry["items"]] == [
            (i["id"], i["ref_loglik"], i["ref_tokens"]) for i in reference["items"]
        ]


def fake_generator(answers: dict[str, str], seen: list[str]):
    """A stand-in for `greedy_generate` that continues each prompt with the answer of the item
    whose prompt it ends with (tokens of the real tokenizer, right-padded)."""

    def generate(model, context, mask, *, max_new_tokens, pad_token_id, tokenizer, **kwargs):
        rows = []
        for ids, keep in zip(context.tolist(), mask.tolist(), strict=True):
            text = tokenizer.decode([t for t, m in zip(ids, keep, strict=True) if m])
            seen.append(text)
            answer = next(a for prompt, a in answers.items() if text.endswith(prompt))
            rows.append(tokenizer.encode(answer, add_special_tokens=False))
        width = max(len(r) for r in rows)
        new = torch.tensor(
            [r + [pad_token_id] * (width - len(r)) for r in rows], device=context.device
        )
        return torch.cat([context, new], dim=1)

    return generate


def test_reference_answers_score_one(
    eval_model_dir: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch,
) -> None:
    answers = {}
    for task in TASKS:
        for item in seeded_subset(load_task(task), 2):
            if task == "gsm8k":  # the whole solution, then the next question (a stop sequence)
                answers[item.prompt] = item.target + "\n\nQuestion: and 7 more?"
            elif task == "svamp":
                answers[item.prompt] = f" The answer is {item.reference}."
            elif task == "mbpp":  # the reference code, then the end marker (a stop sequence)
                answers[item.prompt] = item.reference + "\n[DONE]\nassert False\n"
            else:  # the canonical body, then a new top-level def (a stop sequence)
                answers[item.prompt] = item.reference + "\ndef unused():\n    return 1 / 0\n"
    seen: list[str] = []
    monkeypatch.setattr(harness, "greedy_generate", fake_generator(answers, seen))
    options = EvaluateOptions(
        spec=str(eval_model_dir), out=tmp_path / "eval", limit=2, reference_loglik=False
    )
    results = evaluate_model(options)
    for task, entry in results["tasks"].items():
        assert entry["accuracy"] == 1.0, (task, entry["items"])
        assert entry["ci95"][1] == 1.0
        assert entry["ref_loglik_per_token"] is None
    gsm8k_prompts = [text for text in seen if text.count("Question:") > 1]
    assert gsm8k_prompts and all(text.count("Question:") == 6 for text in gsm8k_prompts)  # 5-shot


def write_bad_gsm8k(root: Path) -> Path:
    (root / "gsm8k").mkdir(parents=True)
    (root / "gsm8k" / "test.jsonl").write_text('{"question": "1+1?"\n')
    (root / "gsm8k" / "train.jsonl").write_text("")
    return root


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
@pytest.mark.parametrize(
    ("case", "error", "match"),
    [
        ("unknown task", ValueError, "unknown task 'gsm9k'"),
        ("limit 0", ValueError, "limit must be a positive number"),
        ("nothing to evaluate", ValueError, "nothing to evaluate"),
        ("missing file", FileNotFoundError, "TYING_BENCH_DIR"),
        ("malformed file", ValueError, "not valid JSON"),
        ("no tokenizer", ValueError, "no tokenizer"),
        ("foreign adapter", ValueError, "another base model"),
    ],
)
def test_bad_input_fails_before_writing(
    case: str,
    error: type,
    match: str,
    eval_model_dir: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch,
) -> None:
    options = EvaluateOptions(
        spec=str(eval_model_dir), tasks="gsm8k", out=tmp_path / "out", limit=1
    )
    if case == "unknown task":
        options.tasks = "gsm8k,gsm9k"
    elif case == "limit 0":
        options.limit = 0
    elif case == "nothing to evaluate":
        options.generate = options.reference_loglik = False
    elif case == "missing file":
        monkeypatch.setenv("TYING_BENCH_DIR", str(tmp_path / "nothing"))
    elif case == "malformed file":
        monkeypatch.setenv("TYING_BENCH_DIR", str(write_bad_gsm8k(tmp_path / "bench")))
    elif case == "no tokenizer":
        from transformers import AutoModelForCausalLM

        bare = tmp_path / "bare"
        AutoModelForCausalLM.from_pretrained(eval_model_dir).save_pretrained(bare)
        options.spec = str(bare)
    else:
        import peft

        other = save_tiny_model(tmp_path / "other", train_tokenizer(512), hidden=48)
        from transformers import AutoModelForCausalLM

        lora = peft.LoraConfig(r=2, target_modules=["q_proj"])
        model = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(other), lora)
        model.save_pretrained(tmp_path / "adapter")
        options.adapter = str(tmp_path / "adapter")  # for a model of width 48, not 32
    with pytest.raises(error, match=match):
        evaluate_model(options)
    assert not Path(options.out).exists()


def test_tying_decoder_through_lm_eval(eval_model_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    """Our own decoder (PIT interface) as an instantiated model: generation and scoring run."""
    from transformers import AutoTokenizer

    from tying.hf import TyingConfig, TyingForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(eval_model_dir)
    config = TyingConfig(
        vocab_size=len(tokenizer), d_model=32, n_layers=2, head_dim=8, max_seq_len=4096, tie="pit"
    )
    lm = harness.TyingLM(TyingForCausalLM(config).eval(), tokenizer, batch_size=2)
    options = EvaluateOptions(
        spec="pit-decoder",
        tasks="svamp,humaneval",
        out=tmp_path,
        limit=2,
        max_new_tokens=3,
        num_fewshot=0,
    )
    results = evaluate_model(options, lm=lm)
    assert results["model"] == "pit-decoder"
    for entry in results["tasks"].values():
        assert entry["n"] == 2
        assert -20.0 < entry["ref_loglik_per_token"] < 0.0
        assert all(1 <= item["ref_tokens"] for item in entry["items"])


@pytest.mark.slow
def test_smollm2_end_to_end(tmp_path: Path) -> None:
    """SmolLM2-135M on 2 items of each task: a trained model gives the references a far higher
    likelihood than chance (-ln 49,152 = -10.8 nats/token)."""
    pytest.importorskip("gguf")
    from tying.hf import named_model_path

    try:
        named_model_path("smollm2")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    options = EvaluateOptions(spec="smollm2", out=tmp_path, limit=2, max_new_tokens=48)
    results = evaluate_model(options)
    assert list(results["tasks"]) == list(TASKS)
    for task, entry in results["tasks"].items():
        assert entry["n"] == 2
        assert entry["truncated_prompts"] == {"generate": 0, "reference": 0}
        assert -4.0 < entry["ref_loglik_per_token"] < 0.0, task
        assert all(isinstance(item["completion"], str) for item in entry["items"])
    # SmolLM2 follows the 5-shot format: its solutions end with "#### <number>"
    assert any("####" in item["completion"] for item in results["tasks"]["gsm8k"]["items"])
