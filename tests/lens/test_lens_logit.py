"""Logit lens: entry L is the model's own distribution (KL 0); agreement with a float64 reference."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tying.hf import HFCausalLM, convert
from tying.lens import FinalDistribution, LogitLens, evaluate_lens, kl_bits, logit_lens_kl
from tying.loader import wrap_model

from .conftest import LAYERS, VOCAB, loaded, tiny_decoder, tiny_llama


def _batches(n: int = 2, batch: int = 2, length: int = 9, vocab: int = VOCAB, seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (batch, length), generator=g) for _ in range(n)]


@pytest.mark.parametrize("tie", ["untied", "tt", "pit"])
def test_decoder_last_entry_kl_is_zero(tie) -> None:
    lm = loaded(tiny_decoder(tie))
    result = logit_lens_kl(lm, _batches(), chunk_tokens=5)
    assert len(result.kl) == LAYERS + 1 == lm.n_entries
    assert result.tokens == 2 * 2 * 9
    assert abs(result.kl[-1]) < 1e-6
    assert all(v >= -1e-7 for v in result.kl)
    assert max(result.kl[:-1]) > 1e-6  # intermediate entries differ from the output


@pytest.mark.parametrize(("tie", "tied"), [("pit", True), ("tt", True), ("untied", False)])
def test_converted_hf_last_entry_kl_is_zero(tie, tied) -> None:
    hf = tiny_llama(tied=tied)
    convert(hf, tie=tie)
    lm = wrap_model(HFCausalLM(hf), name="llama")
    result = logit_lens_kl(lm, _batches(), chunk_tokens=7)
    assert len(result.kl) == 2 + 1
    assert abs(result.kl[-1]) < 1e-6


@pytest.mark.parametrize("tied", [True, False])
def test_plain_hf_model_is_converted_without_changing_logits(tied) -> None:
    hf = tiny_llama(tied=tied)
    ids = _batches(1)[0]
    with torch.no_grad():
        before = hf(ids).logits
    lm = wrap_model(hf, name="plain")
    with torch.no_grad():
        states, final = lm.states_and_final(ids)
        after = lm.logits_from_hidden(final)
        hidden = lm.model.final_hidden(ids)
        last = lm.lens_logits(states[-1])
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(final, hidden)  # the hooked norm output is final_hidden
    torch.testing.assert_close(last, after)  # final_norm(x_L) reproduces the head's input
    assert lm.interface.__class__.__name__ == ("TransposeTying" if tied else "Untied")
    assert abs(logit_lens_kl(lm, [ids]).kl[-1]) < 1e-6


def test_decoder_final_matches_forward() -> None:
    model = tiny_decoder("pit")
    lm = loaded(model)
    ids = _batches(1)[0]
    with torch.no_grad():
        states, final = lm.states_and_final(ids)
        torch.testing.assert_close(lm.logits_from_hidden(final), model(ids))
        torch.testing.assert_close(final, model.final_hidden(ids))
    assert len(states) == LAYERS + 1
    torch.testing.assert_close(states[0], model.interface.embed(ids))


def _naive_kl_bits(model: torch.nn.Module, batches) -> list[float]:
    """Float64 reference: full softmaxes, explicit Σ p (log p − log q) / ln 2, mean over tokens."""
    m64 = copy.deepcopy(model).double()
    totals, count = [0.0] * (len(m64.blocks) + 1), 0
    with torch.no_grad():
        for ids in batches:
            states = m64.residual_states(ids)
            logp = torch.log_softmax(m64.interface.logits(m64.final_hidden(ids)), -1)
            for i, s in enumerate(states):
                logq = torch.log_softmax(m64.interface.logits(m64.final_norm(s)), -1)
                kl = (logp.exp() * (logp - logq)).sum(-1) / math.log(2)
                totals[i] += float(kl.sum())
            count += ids.numel()
    return [t / count for t in totals]


@pytest.mark.parametrize("kind", ["decoder", "hf"])
def test_logit_lens_matches_float64_reference(kind) -> None:
    if kind == "decoder":
        model = tiny_decoder("untied", seed=1)
        # make the layers do something: larger random weights than the init
        with torch.no_grad():
            for p in model.blocks.parameters():
                if p.dim() == 2:
                    p.mul_(8)
    else:
        hf = tiny_llama(tied=False, seed=2)
        convert(hf, tie="untied")
        model = HFCausalLM(hf)
    batches = _batches(3, batch=2, length=11, seed=5)
    reference = _naive_kl_bits(model, batches)
    result = evaluate_lens(wrap_model(model), LogitLens(), batches, chunk_tokens=6)
    assert result.tokens == 3 * 2 * 11
    for got, want in zip(result.kl, reference):
        assert got == pytest.approx(want, rel=1e-4, abs=1e-6)
    assert min(reference[:-1]) > 1e-3


@pytest.mark.parametrize(("scale", "V"), [(1.0, 500), (30.0, 500), (10.0, 50_000)])
def test_kl_matches_float64_kl_div(scale, V) -> None:
    g = torch.Generator().manual_seed(0)
    a, b = scale * torch.randn(6, V, generator=g), scale * torch.randn(6, V, generator=g)
    reference = torch.nn.functional.kl_div(
        torch.log_softmax(b.double(), -1),
        torch.log_softmax(a.double(), -1),
        log_target=True,
        reduction="none",
    ).sum(-1)
    got = kl_bits(a, b).double() * math.log(2)
    torch.testing.assert_close(got, reference, rtol=1e-5, atol=1e-5 * scale)
    assert torch.all(kl_bits(a, a) == 0)  # exactly: the logit difference is 0
    with pytest.raises(ValueError, match="shape"):
        kl_bits(a, b[:, :5])


def test_kl_gradient_is_q_minus_p() -> None:
    g = torch.Generator().manual_seed(1)
    a = torch.randn(3, 40, generator=g, dtype=torch.float64)
    b = torch.randn(3, 40, generator=g, dtype=torch.float64, requires_grad=True)
    FinalDistribution.from_logits(a).kl_nats(b).sum().backward()
    torch.testing.assert_close(b.grad, torch.softmax(b.detach(), -1) - torch.softmax(a, -1))


def test_bits_per_byte_and_record() -> None:
    lm = loaded(tiny_decoder())
    result = logit_lens_kl(lm, _batches(1))
    record = result.to_dict("tiny", "logit")
    assert set(record) == {"name", "kind", "unit", "tokens", "kl"}
    result.bytes = 2 * result.tokens
    record = result.to_dict("tiny", "logit")
    assert record["unit"] == "bits/token"
    assert record["kl_bits_per_byte"] == pytest.approx([v / 2 for v in record["kl"]])
