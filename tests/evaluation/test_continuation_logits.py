"""Log-likelihoods with the head on the continuation positions only: the window of a batch by
hand, and `TyingLM`'s numbers against lm-eval's own HFLM (all positions) on the same model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from tying.evaluation.continuation_logits import ContinuationWindows
from tying.evaluation.harness import TyingLM
from tying.evaluation.loading import causal_lm_of, load_for_evaluation

from ._harness_models import random_lora


def request(context: list[int], continuation: list[int]) -> tuple:
    return (("", ""), context, continuation)


def test_window_by_hand() -> None:
    windows = ContinuationWindows(
        [
            request([5, 6, 7, 8], [9, 10]),  # input row 5 6 7 8 9, n 5, c 2
            request([5, 6], [7]),  # n 2, c 1
            request([3, 4], [4, 0]),  # n 3 (3 4 4), its continuation ends with a pad id
            request([3, 4, 4], [0]),  # the same input row 3 4 4, c 1: the longer c counts
            request([1, 2, 3, 4, 5, 6, 7, 8], [9]),  # truncated to max_length + 1 = 7: n 6
            request([8], [9, 10]),  # n 2, c 2: every position of its row
        ],
        max_length=6,
    )
    rows = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 0, 0, 0]])
    # row 0: T - n + c = 5 - 5 + 2 = 2; row 1: 5 - 2 + 1 = 4
    assert windows.positions_to_keep(rows) == 4
    assert windows.positions_to_keep(rows[:1]) == 2
    # 3 4 4 then padding: n 3, c 2 -> 5 - 3 + 2 = 4
    assert windows.positions_to_keep(torch.tensor([[3, 4, 4, 0, 0]])) == 4
    # the truncated row 3 4 5 6 7 8 (n 6, c 1) -> 1
    assert windows.positions_to_keep(torch.tensor([[3, 4, 5, 6, 7, 8]])) == 1
    # a row that is no request's (lm-eval's batch-size probe): all positions
    assert windows.positions_to_keep(torch.tensor([[1, 1, 1, 1, 1], [5, 6, 7, 8, 9]])) == 0
    # a window as wide as the batch: all positions (0), not T
    assert windows.positions_to_keep(torch.tensor([[5, 6, 0]])) == 2
    assert windows.positions_to_keep(torch.tensor([[8, 9]])) == 0


def loglikelihood_requests() -> list[Instance]:
    """Contexts of very different lengths (so that the batches are padded) and continuations of
    one to many tokens, two sharing a context."""
    texts = [
        ("Question: " + "how many apples are in the basket? " * 6 + "\nAnswer:", " 42 apples"),
        ("Question: how many apples?\nAnswer:", " 42"),
        ("Question: how many apples?\nAnswer:", " forty-two apples, counted twice"),
        ("def add(a, b):\n", "    return a + b\n"),
        ("It was the best of times, it was the worst of times,", " it was the age of wisdom"),
        ("Once", " upon a time"),
        ("x" * 3, " " + "long continuation " * 5),
    ]
    return [Instance(request_type="loglikelihood", doc={}, arguments=pair, idx=0) for pair in texts]


def check_same_as_lm_eval(ours: TyingLM, **hflm_options) -> None:
    """Same (log-likelihood, greedy) pairs as lm-eval's HFLM on the same model, and the head
    really ran on fewer positions than the batch had."""
    theirs = HFLM(pretrained=ours.model, tokenizer=ours.tokenizer, backend="causal", **hflm_options)
    kept: list[tuple[int, int]] = []
    forward = ours.model.forward

    def spy(input_ids, *args, **kwargs):
        kept.append((int(kwargs.get("logits_to_keep", 0)), input_ids.shape[1]))
        return forward(input_ids, *args, **kwargs)

    expected = theirs.loglikelihood(loglikelihood_requests(), disable_tqdm=True)
    ours.model.forward = spy
    try:
        got = ours.loglikelihood(loglikelihood_requests(), disable_tqdm=True)
    finally:
        del ours.model.forward
    assert [g for _, g in got] == [g for _, g in expected]
    torch.testing.assert_close(
        torch.tensor([ll for ll, _ in got], dtype=torch.float64),
        torch.tensor([ll for ll, _ in expected], dtype=torch.float64),
        rtol=1e-6,
        atol=1e-4,
    )
    assert any(0 < keep < width for keep, width in kept), kept
    assert ours._windows is None  # forgotten after the call


def test_llama_matches_lm_eval(tiny_teacher: Path) -> None:
    ours = TyingLM(spec=str(tiny_teacher), batch_size=3, device="cpu")
    check_same_as_lm_eval(ours, batch_size=3)


def test_truncated_requests_match_lm_eval(tiny_teacher: Path) -> None:
    ours = TyingLM(spec=str(tiny_teacher), batch_size=2, device="cpu", max_length=48)
    lengths = [
        len(ours.tok_encode(r.arguments[0] + r.arguments[1])) for r in loglikelihood_requests()
    ]
    assert max(lengths) > 48 + 1  # lm-eval cuts some rows from the left
    check_same_as_lm_eval(ours, batch_size=2, max_length=48)


@pytest.mark.parametrize("tie", ["tt", "pit", "untied"])
def test_tying_decoder_matches_lm_eval(tiny_teacher: Path, tie: str) -> None:
    from tying.decoder import Decoder, ModelConfig

    tokenizer = load_for_evaluation(tiny_teacher).tokenizer
    torch.manual_seed(0)
    decoder = Decoder(ModelConfig(vocab_size=512, d_model=64, n_layers=2, tie=tie)).eval()
    model = causal_lm_of(decoder, eos_token_id=tokenizer.eos_token_id)
    check_same_as_lm_eval(TyingLM(model, tokenizer, batch_size=4), batch_size=4)


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_adapted_model_matches_lm_eval(tiny_teacher: Path, tmp_path: Path) -> None:
    """Through peft's wrappers (logits_to_keep reaches the transformers model)."""
    random_lora(tiny_teacher, tmp_path / "adapter")
    ours = TyingLM(spec=str(tiny_teacher), adapter=str(tmp_path / "adapter"), batch_size=3)
    check_same_as_lm_eval(ours, batch_size=3)


def test_rolling_loglikelihood_matches_lm_eval(tiny_teacher: Path) -> None:
    """Perplexity requests (rolling windows) go through the same path."""
    ours = TyingLM(spec=str(tiny_teacher), batch_size=2, device="cpu", max_length=16)
    theirs = HFLM(
        pretrained=ours.model,
        tokenizer=ours.tokenizer,
        backend="causal",
        batch_size=2,
        max_length=16,
    )
    text = "It was the best of times, it was the worst of times, it was the age of wisdom. " * 3
    make = lambda: [  # noqa: E731
        Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,), idx=0)
    ]
    got = ours.loglikelihood_rolling(make(), disable_tqdm=True)
    expected = theirs.loglikelihood_rolling(make(), disable_tqdm=True)
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-4)
