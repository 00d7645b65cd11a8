"""The lm-eval model "tying": loading specs and adapters, greedy generation through lm-eval's own
request path (same strings as lm-eval's HFLM), errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.registry import get_model
from lm_eval.models.huggingface import HFLM

from tying.evaluation.generate import greedy_generate
from tying.evaluation.harness import TyingLM
from tying.evaluation.loading import causal_lm_of, check_adapter_base, load_for_evaluation

from ._harness_models import random_lora

PROMPTS = ["Question: how many apples?\nAnswer:", "It was the best of times,", "Once"]


def requests(until: list[str], max_gen_toks: int = 12) -> list[Instance]:
    kwargs = {"until": until, "max_gen_toks": max_gen_toks, "do_sample": False}
    return [
        Instance(request_type="generate_until", doc={}, arguments=(p, dict(kwargs)), idx=0)
        for p in PROMPTS
    ]


def test_registered_under_tying() -> None:
    assert get_model("tying") is TyingLM


def test_generate_until_matches_lm_eval_hflm(tiny_teacher: Path, monkeypatch) -> None:
    ours = TyingLM(spec=str(tiny_teacher), batch_size=2, device="cpu")
    theirs = HFLM(pretrained=ours.model, tokenizer=ours.tokenizer, batch_size=2, backend="causal")
    for until in (["\n\n"], [" the", "."]):
        got = ours.generate_until(requests(until), disable_tqdm=True)
        expected = theirs.generate_until(requests(until), disable_tqdm=True)
        assert got == expected
        assert all(isinstance(s, str) for s in got)
    # the greedy requests really went through greedy_generate, a sampling one does not
    import tying.evaluation.harness as harness

    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs["stop_strings"])
        return greedy_generate(*args, **kwargs)

    monkeypatch.setattr(harness, "greedy_generate", spy)
    ours.generate_until(requests(["\n"]), disable_tqdm=True)
    assert calls and all("\n" in stop for stop in calls)
    calls.clear()
    sampled = requests(["\n"])
    for r in sampled:
        r.arguments[1].update(do_sample=True, temperature=1.0)
    assert len(ours.generate_until(sampled, disable_tqdm=True)) == len(PROMPTS)
    assert not calls


def test_spec_loading_and_errors(tiny_teacher: Path, tmp_path: Path) -> None:
    loaded = load_for_evaluation(tiny_teacher)
    assert loaded.tokenizer.eos_token == "<|endoftext|>"
    ids = loaded.tokenizer("It was")["input_ids"]
    assert ids == loaded.tokenizer.backend_tokenizer.encode("It was").ids
    lm = get_model("tying").create_from_arg_string(
        f"spec={tiny_teacher},dtype=float32", {"batch_size": 1, "device": "auto"}
    )
    assert lm.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():  # one device resolver: CUDA is refused, not replaced
        with pytest.raises(ValueError, match="CUDA is not available"):
            get_model("tying").create_from_arg_string(
                f"spec={tiny_teacher}", {"batch_size": 1, "device": "cuda:0"}
            )
    assert lm.get_model_info()["model_spec"] == str(tiny_teacher)

    bare = tmp_path / "bare"
    loaded.model.save_pretrained(bare)  # no tokenizer files
    with pytest.raises(ValueError, match="no tokenizer"):
        TyingLM(spec=str(bare))
    with pytest.raises(ValueError, match="spec="):
        TyingLM()
    with pytest.raises(ValueError, match="tokenizer"):
        TyingLM(loaded.model)
    with pytest.raises(FileNotFoundError):
        TyingLM(spec=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="dtype"):
        TyingLM(spec=str(tiny_teacher), dtype="float8")


def test_decoder_is_wrapped_without_copy() -> None:
    from tying.decoder import Decoder, ModelConfig

    decoder = Decoder(ModelConfig(vocab_size=300, d_model=64, n_layers=2, tie="pit")).eval()
    lm = causal_lm_of(decoder, eos_token_id=2)
    assert lm.model is decoder
    assert all(p.device.type == "cpu" for p in lm.parameters())
    ids = torch.randint(0, 300, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(lm(ids).logits, decoder(ids), rtol=0, atol=0)
    assert lm.generate(ids, max_new_tokens=3, do_sample=False).shape == (2, 10)


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_adapter_is_applied_and_checked(tiny_teacher: Path, tmp_path: Path) -> None:
    from ..conftest import random_llama

    base, tuned = random_lora(tiny_teacher, tmp_path / "adapter")
    ids = torch.randint(0, 512, (1, 6))
    with torch.no_grad():
        expected = tuned(ids).logits
        plain = load_for_evaluation(tiny_teacher).model(ids).logits
    adapted = TyingLM(spec=str(tiny_teacher), adapter=str(tmp_path / "adapter"), device="cpu")
    with torch.no_grad():
        got = adapted.model(ids).logits
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(got, plain)

    other = random_llama(512, 32, 64, 128, tied=True, pad_token_id=0)  # another width
    with pytest.raises(ValueError, match="another base model"):
        check_adapter_base(tmp_path / "adapter", other)
    with pytest.raises(ValueError, match="another base model"):
        TyingLM(other, base.tokenizer, adapter=str(tmp_path / "adapter"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        TyingLM(spec=str(tiny_teacher), adapter=str(tmp_path / "empty"))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "adapter_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        check_adapter_base(tmp_path / "broken", other)
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["r"] == 4


def test_logits_reach_lm_eval_in_float32(tiny_teacher: Path) -> None:
    """Under bf16 autocast lm-eval sums log-softmaxes of the logits it gets: float32 ones."""
    lm = TyingLM(spec=str(tiny_teacher), device="cpu", mixed_precision_dtype="bfloat16")
    logits = lm._model_call(torch.tensor([[1, 2, 3, 4]]))
    assert logits.dtype == torch.float32 and logits.shape[:2] == (1, 4)
