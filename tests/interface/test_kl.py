"""Chunked distillation losses: values and gradients against full-logit formulas (float64)."""

import pytest
import torch
import torch.nn.functional as F

from tying import PseudoInverseTying, TransposeTying
from tying.interface.kl import linear_distillation_loss, linear_kl_divergence


def heads(N=37, d=8, d_t=6, V=50, seed=0):
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    x, W, b = r(N, d).requires_grad_(), r(V, d).requires_grad_(), r(V).requires_grad_()
    return x, W, b, r(N, d_t), r(V, d_t), r(V)


@pytest.mark.parametrize("tau", [1.0, 2.5])
def test_kl_matches_full_logits(tau) -> None:
    x, W, b, tx, tW, tb = heads()
    out = linear_kl_divergence(x, W, tx, tW, b, tb, temperature=tau, chunk_size=5)
    s, t = (x @ W.T + b) / tau, (tx @ tW.T + tb) / tau
    ref = F.kl_div(
        F.log_softmax(s, -1), F.log_softmax(t, -1), log_target=True, reduction="batchmean"
    )
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for a, c in zip(torch.autograd.grad(out, (x, W, b)), torch.autograd.grad(ref, (x, W, b))):
        torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_distillation_loss_matches_formula_with_ignored_targets(alpha) -> None:
    x, W, b, tx, tW, tb = heads()
    y = torch.randint(0, 50, (37,), generator=torch.Generator().manual_seed(2))
    y[[3, 20]] = -100
    tau = 2.0
    loss, ce, kl = linear_distillation_loss(
        x, W, tx, tW, y, b, tb, alpha=alpha, temperature=tau, chunk_size=7
    )
    m = y != -100
    s, t = (x @ W.T + b)[m], (tx @ tW.T + tb)[m]
    ref_ce = F.cross_entropy(s, y[m])
    ref_kl = F.kl_div(
        F.log_softmax(s / tau, -1),
        F.log_softmax(t / tau, -1),
        log_target=True,
        reduction="batchmean",
    )
    ref = (1 - alpha) * ref_ce + alpha * tau**2 * ref_kl
    torch.testing.assert_close(loss, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ce, ref_ce.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(kl, ref_kl.detach(), rtol=1e-12, atol=1e-12)
    assert not ce.requires_grad and not kl.requires_grad
    for a, c in zip(torch.autograd.grad(loss, (x, W, b)), torch.autograd.grad(ref, (x, W, b))):
        torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-12)


def test_gradcheck_float64() -> None:
    x, W, b, tx, tW, tb = heads(N=6, d=3, d_t=4, V=9)
    y = torch.randint(0, 9, (6,))

    def f(x, W, b):
        return linear_distillation_loss(x, W, tx, tW, y, b, tb, alpha=0.4, temperature=1.7)[0]

    assert torch.autograd.gradcheck(f, (x, W, b))


def test_student_equal_to_teacher_gives_zero_kl_and_zero_gradient() -> None:
    g = torch.Generator().manual_seed(0)
    tt = TransposeTying(torch.randn(60, 8, generator=g, dtype=torch.float64))
    teacher = TransposeTying(tt.weight.detach().clone())
    h = torch.randn(20, 8, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 60, (20,), generator=g)
    loss, ce, kl = tt.distillation_loss(h, y, teacher, h.detach(), alpha=1.0, temperature=2.0)
    assert abs(float(kl)) < 1e-14 and abs(float(loss.detach())) < 1e-13
    loss.backward()
    assert float(h.grad.abs().max()) < 1e-14
    assert float(tt.weight.grad.abs().max()) < 1e-14
    assert float(ce) > 0  # the CE is still reported


def test_pit_student_against_tt_teacher_through_interfaces() -> None:
    g = torch.Generator().manual_seed(1)
    pit = PseudoInverseTying.scratch(40, 6, generator=g, dtype=torch.float64)
    teacher = TransposeTying(torch.randn(40, 5, generator=g, dtype=torch.float64))
    h = torch.randn(9, 6, generator=g, dtype=torch.float64)
    th = torch.randn(9, 5, generator=g, dtype=torch.float64)
    kl = pit.kl_from(h, teacher, th, temperature=1.5)
    ref = F.kl_div(
        F.log_softmax(pit.logits(h) / 1.5, -1),
        F.log_softmax(teacher.logits(th) / 1.5, -1),
        log_target=True,
        reduction="batchmean",
    )
    torch.testing.assert_close(kl, ref)


def test_bad_inputs() -> None:
    x, W, _b, tx, tW, _tb = heads()
    with pytest.raises(ValueError, match="vocabularies differ"):
        linear_kl_divergence(x, W, tx, tW[:10])
    with pytest.raises(ValueError, match="temperature"):
        linear_kl_divergence(x, W, tx, tW, temperature=0.0)
    with pytest.raises(ValueError, match="pass targets"):
        linear_distillation_loss(x, W, tx, tW, alpha=0.5)
    with pytest.raises(ValueError, match="token counts"):
        linear_kl_divergence(x, W, tx[:5], tW)
    with pytest.raises(ValueError, match="alpha"):
        linear_distillation_loss(x, W, tx, tW, torch.zeros(37, dtype=torch.long), alpha=1.5)


def test_bf16_autocast_stays_close_to_fp32() -> None:
    x, W, b, tx, tW, tb = (t.detach().float() for t in heads(N=64, V=300))
    ref = linear_kl_divergence(x, W, tx, tW, b, tb)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = linear_kl_divergence(x, W, tx, tW, b, tb)
    assert out.dtype == torch.float32
    assert abs(float(out) - float(ref)) < 0.05 * float(ref)
