"""The lens's row kernels: compiled and eager runs of the same functions agree with each other
and with a naive float64 reference; a compiler failure falls back to eager; TYING_COMPILE=0."""

from __future__ import annotations

import logging
import math

import pytest
import torch

import tying.lens.head as head_module
from tying import kernels as kernels_module
from tying.lens.head import LensHead
from tying.lens.kernels import EXP_FLOOR, GROUP, RowKernels, compiler_available, row_grad, row_stats

V = 1000  # a ragged last group (1000 = 7 × 128 + 104)


def _block(seed: int = 0, n: int = 9):
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(n, V, generator=g) * 20).bfloat16()
    bias = torch.randn(V, generator=g)
    probs = torch.softmax(torch.randn(n, V, generator=g) * 3, dim=1)
    return z, bias, probs


def _reference(z, bias, softcap, probs):
    """Naive float64 statistics of the module docstring, one formula each."""
    x = z.double() + (0 if bias is None else bias.double())
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    pad = -x.shape[1] % GROUP
    groups = torch.nn.functional.pad(x, (0, pad), value=-math.inf).view(x.shape[0], -1, GROUP)
    m = x.max(dim=1).values
    s = torch.exp((x - m[:, None]).clamp(min=EXP_FLOOR)).sum(dim=1)
    dot = (probs.double() * (x - m[:, None])).sum(dim=1)
    q = torch.softmax(x, dim=1)
    grad = q - probs.double()
    if softcap is not None:
        grad = grad * (1 - torch.tanh((z.double() + bias.double()) / softcap) ** 2)
    return groups.amax(dim=2), m, s, dot, grad


@pytest.mark.parametrize(("with_bias", "softcap"), [(False, None), (True, 30.0)])
def test_eager_kernels_match_the_float64_reference(with_bias, softcap) -> None:
    z, bias, probs = _block()
    bias = bias if with_bias else None
    groups, m, s, dot = row_stats(z, torch.float32, bias, softcap, probs)
    ref = _reference(z, bias, softcap, probs)
    assert groups.shape == (z.shape[0], -(-V // GROUP))
    for got, want in zip((groups, m, s, dot), ref[:4], strict=True):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)
    grad = row_grad(z, torch.float32, bias, softcap, m, s, probs)
    assert grad.dtype == torch.bfloat16
    torch.testing.assert_close(grad.double(), ref[4], rtol=1e-2, atol=1e-3)


@pytest.mark.skipif(not compiler_available(torch.device("cpu")), reason="no C++ compiler")
def test_compiled_kernels_and_lens_equal_the_eager_ones(monkeypatch) -> None:
    """The compiled kernels on a block and through `LensHead` (whole chunks instead of row
    blocks) give the eager results to float32 rounding; two row counts share one kernel."""
    monkeypatch.setenv(kernels_module.COMPILE_ENV, "1")
    monkeypatch.setattr(kernels_module, "COMPILE_MIN_ELEMENTS", 0)
    compiled = RowKernels()
    z, bias, probs = _block()
    for rows in (9, 5):
        args = (torch.float32, bias, 30.0, probs[:rows])
        got = compiled.stats(z[:rows], *args)
        want = row_stats(z[:rows], *args)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-5)
        m, s = want[1], want[2]
        torch.testing.assert_close(
            compiled.grad(z[:rows], torch.float32, bias, 30.0, m, s, probs[:rows]).float(),
            row_grad(z[:rows], torch.float32, bias, 30.0, m, s, probs[:rows]).float(),
            rtol=1e-2,
            atol=1e-3,
        )
    assert set(compiled._compiled) == {row_stats, row_grad} and not compiled._failed

    g = torch.Generator().manual_seed(3)
    U = torch.randn(V, 32, generator=g) / math.sqrt(32)
    final = torch.randn(40, 32, generator=g) * 8
    hidden = final + torch.randn(40, 32, generator=g) * 4
    head = LensHead(U.bfloat16(), U)
    target = head.target(final)
    monkeypatch.setattr(head_module, "kernels", compiled)
    fused = head.kl(hidden, target)
    monkeypatch.setenv(kernels_module.COMPILE_ENV, "0")
    assert not compiled.enabled(10**9, torch.device("cpu"))
    torch.testing.assert_close(head.kl(hidden, target), fused, rtol=1e-6, atol=1e-6)


def test_a_compiler_failure_falls_back_to_eager(monkeypatch, caplog) -> None:
    monkeypatch.setenv(kernels_module.COMPILE_ENV, "1")
    monkeypatch.setattr(kernels_module, "COMPILE_MIN_ELEMENTS", 0)
    monkeypatch.setattr(kernels_module, "compiler_available", lambda device: True)

    def broken(fn, **options):
        def run(*args):
            raise RuntimeError("no compiler here")

        return run

    monkeypatch.setattr(torch, "compile", broken)
    kernels = RowKernels()
    z, bias, _ = _block()
    with caplog.at_level(logging.WARNING, logger=kernels_module.__name__):
        got = kernels.stats(z, torch.float32, bias, None, None)
    assert kernels._failed and not kernels.enabled(10**9, torch.device("cpu"))
    assert "no compiler here" in caplog.text
    for a, b in zip(got[:3], row_stats(z, torch.float32, bias, None, None)[:3], strict=True):
        assert torch.equal(a, b)
