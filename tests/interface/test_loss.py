"""The chunked loss equals full cross-entropy in value and gradients."""

import pytest
import torch
import torch.nn.functional as F

from tying import PseudoInverseTying, TransposeTying, Untied, linear_cross_entropy


def _full(x, w, t, b, reduction):
    return F.cross_entropy(F.linear(x, w, b), t, ignore_index=-100, reduction=reduction)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 7, 1000])
def test_matches_full_cross_entropy_float64(reduction, with_bias, chunk_size) -> None:
    N, V, d = 23, 37, 6
    x = torch.randn(N, d, dtype=torch.float64, requires_grad=True)
    w = torch.randn(V, d, dtype=torch.float64, requires_grad=True)
    b = torch.randn(V, dtype=torch.float64, requires_grad=True) if with_bias else None
    t = torch.randint(0, V, (N,))
    t[[2, 5, 17]] = -100
    inputs = [x, w] + ([b] if with_bias else [])
    upstream = torch.randn(N, dtype=torch.float64) if reduction == "none" else torch.tensor(1.7)

    ours = linear_cross_entropy(x, w, t, b, reduction=reduction, chunk_size=chunk_size)
    ref = _full(x, w, t, b, reduction)
    torch.testing.assert_close(ours, ref)
    g_ours = torch.autograd.grad(ours, inputs, upstream.to(ours.dtype))
    g_ref = torch.autograd.grad(ref, inputs, upstream.to(ref.dtype))
    for a, r in zip(g_ours, g_ref):
        torch.testing.assert_close(a, r)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_gradcheck(reduction) -> None:
    x = torch.randn(9, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(11, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(11, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 11, (9,))
    t[0] = -100

    def f(x, w, b):
        return linear_cross_entropy(x, w, t, b, reduction=reduction, chunk_size=4)

    assert torch.autograd.gradcheck(f, (x, w, b))


def test_all_ignored_mean_is_nan_like_torch() -> None:
    x = torch.randn(4, 3)
    w = torch.randn(5, 3)
    t = torch.full((4,), -100)
    assert torch.isnan(linear_cross_entropy(x, w, t)) and torch.isnan(_full(x, w, t, None, "mean"))


def test_frozen_weight_gets_no_gradient_and_input_gradient_is_right() -> None:
    x = torch.randn(8, 3, requires_grad=True)
    w = torch.randn(5, 3)  # frozen, as PIT's Z: only the input gradient is computed
    t = torch.randint(0, 5, (8,))
    (gx,) = torch.autograd.grad(linear_cross_entropy(x, w, t, chunk_size=3), [x])
    (ref,) = torch.autograd.grad(_full(x, w, t, None, "mean"), [x])
    torch.testing.assert_close(gx, ref)
    assert w.grad is None


def test_no_grad_mode_returns_value() -> None:
    x = torch.randn(8, 3, requires_grad=True)
    w = torch.randn(5, 3, requires_grad=True)
    t = torch.randint(0, 5, (8,))
    with torch.no_grad():
        v = linear_cross_entropy(x, w, t)
    assert not v.requires_grad
    torch.testing.assert_close(v, _full(x, w, t, None, "mean").detach())


def test_multidimensional_inputs_are_flattened() -> None:
    x = torch.randn(2, 5, 4)
    w = torch.randn(9, 4)
    t = torch.randint(0, 9, (2, 5))
    torch.testing.assert_close(
        linear_cross_entropy(x, w, t), _full(x.reshape(10, 4), w, t.reshape(10), None, "mean")
    )
    assert linear_cross_entropy(x, w, t, reduction="none").shape == (2, 5)


def _interfaces(V: int, d: int):
    g = torch.Generator().manual_seed(0)
    yield Untied.scratch(V, d, generator=g, init_std=0.3)
    yield TransposeTying.scratch(V, d, generator=g, init_std=0.3)
    pit = PseudoInverseTying.scratch(V, d, generator=g, trainable_z=True)
    with torch.no_grad():
        pit.l_param.diagonal().normal_(0, 0.2)
    yield pit


@pytest.mark.parametrize("index", [0, 1, 2])
def test_interface_loss_equals_cross_entropy_of_logits(index) -> None:
    iface = list(_interfaces(50, 8))[index].double()
    iface.loss_chunk_size = 3
    ids = torch.randint(0, 50, (17,))
    targets = torch.randint(0, 50, (17,))
    targets[4] = -100
    params = [p for p in iface.parameters()]

    def run(use_chunked: bool):
        h = torch.tanh(iface.embed(ids))
        loss = iface.loss(h, targets) if use_chunked else F.cross_entropy(iface.logits(h), targets)
        return loss, torch.autograd.grad(loss, params)

    (l1, g1), (l2, g2) = run(True), run(False)
    torch.testing.assert_close(l1, l2)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b)


def test_bad_targets() -> None:
    x = torch.randn(4, 3)
    w = torch.randn(5, 3)
    with pytest.raises(IndexError, match=r"target id 5 .*\[0, 5\)"):
        linear_cross_entropy(x, w, torch.tensor([0, 1, 5, 2]))
    with pytest.raises(ValueError, match="4 tokens"):
        linear_cross_entropy(torch.randn(3, 3), w, torch.tensor([0, 1, 2, 2]))
    with pytest.raises(ValueError, match="reduction"):
        linear_cross_entropy(x, w, torch.tensor([0, 1, 2, 2]), reduction="avg")
    with pytest.raises(ValueError, match="integer"):
        linear_cross_entropy(x, w, torch.zeros(4))


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_padded_vocabulary_gives_the_same_loss_and_gradients(monkeypatch, reduction, with_bias):
    """The CUDA path pads V to a multiple of 64 (zero rows, bias −inf): forced here on the CPU,
    values and gradients equal the unpadded path in float64."""
    import tying.interface.loss as loss_module

    g = torch.Generator().manual_seed(3)
    N, d, V = 37, 16, 101
    x = torch.randn(N, d, generator=g, dtype=torch.float64, requires_grad=True)
    W = torch.randn(V, d, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(V, generator=g, dtype=torch.float64, requires_grad=True) if with_bias else None
    t = torch.randint(0, V, (N,), generator=g)
    t[::5] = -100
    weights = torch.rand(N, generator=g, dtype=torch.float64)

    def run():
        out = loss_module.linear_cross_entropy(x, W, t, b, reduction=reduction, chunk_size=8)
        total = out if reduction == "mean" else (out * weights).sum()
        params = [x, W] + ([b] if b is not None else [])
        return (total, *torch.autograd.grad(total, params))

    plain = run()
    monkeypatch.setattr(loss_module, "vocab_padding", lambda V, device: (-V) % 64)
    padded = run()
    for a, c in zip(plain, padded, strict=True):
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)
