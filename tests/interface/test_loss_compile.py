"""`torch.compile` trains what eager mode trains: the chunked losses are opaque custom ops.

The losses used to be `autograd.Function`s that wrote their gradients in `forward` into
buffers handed to `save_for_backward`; torch 2.11 compiled that into all-zero gradients (the
loss stayed flat). 8 AdamW steps of a tiny decoder, compiled and eager, must give the same
losses (within 1e-3 nats) and gradients (within 1e-4 relative, per parameter, in fp32).

`aot_eager` traces the model through AOTAutograd (where the 2.11 regression lived) but runs
the traced graph with eager kernels: it needs no C++ compiler, so the full matrix (TT, PIT,
untied; with and without distillation) runs everywhere, in seconds. The `inductor` cases
generate and compile C++ code and are skipped without a compiler; the two that train the
model take a minute each on 2 cores and are marked slow (`make test-slow`, `make
test-compat`); one of them also compiles the loss's own row kernels inside the custom op (a
compiled function called from an op of a compiled model).
"""

from __future__ import annotations

import copy
from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F

import tying.kernels as kernels_module
from tying.decoder import Decoder
from tying.decoder.presets import preset_config
from tying.interface import kl as kl_module
from tying.interface import loss as loss_module
from tying.interface.kl import linear_distillation_loss
from tying.interface.loss import linear_cross_entropy
from tying.train.distill import DistillationObjective

V = 384
STEPS = 8
needs_compiler = pytest.mark.skipif(
    not kernels_module.compiler_available(torch.device("cpu")),
    reason="the inductor backend of torch.compile needs a C++ compiler (g++, clang++ or $CXX)",
)


def _models(tie: str, distill: bool) -> tuple[Decoder, Decoder | None]:
    cfg = preset_config("tiny", vocab_size=V, tie=tie, n_layers=1, max_seq_len=32)
    student = Decoder(cfg, generator=torch.Generator().manual_seed(0))
    if not distill:
        return student, None
    teacher_cfg = preset_config("tiny", vocab_size=V, tie="untied", n_layers=1, max_seq_len=32)
    teacher = Decoder(teacher_cfg, generator=torch.Generator().manual_seed(1)).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return student, teacher


def _train(student, teacher, backend: str | None, bf16: bool = False):
    """Losses and per-parameter gradients of `STEPS` AdamW steps (compiled with `backend`)."""
    torch._dynamo.reset()
    model = copy.deepcopy(student).train()
    objective = model
    if teacher is not None:
        objective = DistillationObjective(model, teacher, 0.5, 2.0, teacher_autocast=False)
    step = objective if backend is None else torch.compile(objective, backend=backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(2)
    losses, grads = [], []
    for _ in range(STEPS):
        x = torch.randint(0, V, (2, 16), generator=g)
        y = torch.roll(x, -1, dims=1)
        y[0, -1] = -100
        with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext():
            out = step(x, y)
        loss = out[0] if isinstance(out, tuple) else out
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return losses, grads


def _assert_same_training(eager, compiled, loss_tol: float, grad_rtol: float) -> None:
    """Step by step, the gradients (relative error of each parameter's, in norm) and losses."""
    (eager_losses, eager_grads), (losses, grads) = eager, compiled
    worst_loss = worst_grad = 0.0
    for step in range(STEPS):
        got, want = grads[step], eager_grads[step]
        assert got.keys() == want.keys()
        for name, w in want.items():
            norm = float(w.norm())
            assert norm > 0, f"step {step}: {name} has a zero eager gradient"
            err = float((got[name] - w).norm()) / norm
            worst_grad = max(worst_grad, err)
            assert err <= grad_rtol, f"step {step}: {name} gradient off by {err:.2e} (relative)"
        a, b = losses[step], eager_losses[step]
        worst_loss = max(worst_loss, abs(a - b))
        assert abs(a - b) <= loss_tol, f"step {step}: loss {a} compiled, {b} eager"
    print(f"largest differences: loss {worst_loss:.2e} nats, gradient {worst_grad:.2e} relative")


@pytest.mark.parametrize("distill", [False, True], ids=["ce", "distill"])
@pytest.mark.parametrize("tie", ["tt", "pit", "untied"])
def test_compiled_training_equals_eager(tie: str, distill: bool) -> None:
    student, teacher = _models(tie, distill)
    eager = _train(student, teacher, None)
    _assert_same_training(eager, _train(student, teacher, "aot_eager"), 1e-3, 1e-4)


@pytest.mark.slow  # about a minute on 2 cores (C++ code for the model, its backward, the loss)
@needs_compiler
def test_inductor_training_equals_eager_with_compiled_row_kernels(monkeypatch) -> None:
    """Inductor on the model, and the loss's row kernels compiled inside the custom op."""
    student, teacher = _models("pit", True)
    eager = _train(student, teacher, None)
    monkeypatch.setenv(kernels_module.COMPILE_ENV, "1")
    monkeypatch.setattr(kernels_module, "COMPILE_MIN_ELEMENTS", 0)
    kernels = kernels_module.CompiledKernels("test")
    monkeypatch.setattr(loss_module, "kernels", kernels)
    monkeypatch.setattr(loss_module, "compiles_on", lambda device: True)  # as on a GPU
    compiled = _train(student, teacher, "inductor")
    assert set(kernels._compiled) == {kl_module.distill_rows} and not kernels._failed
    _assert_same_training(eager, compiled, 1e-3, 1e-4)


@pytest.mark.slow  # about 40 s on 2 cores
@needs_compiler
def test_inductor_bf16_autocast_training_stays_close_to_eager() -> None:
    """bf16 autocast: Inductor fuses chains of elementwise ops and skips the bf16 roundings
    between them that eager mode makes (and may order the matrix products' sums
    differently), so compiled and eager differ by a few bf16 ulps (2^-8 ≈ 0.4 % each) per
    step; AdamW normalises the gradients, so the runs do not drift apart over 8 steps."""
    student, _ = _models("tt", False)
    eager = _train(student, None, None, bf16=True)
    _assert_same_training(eager, _train(student, None, "inductor", bf16=True), 2e-2, 5e-2)


# --------------------------------------------------------------------- the custom ops
def _ce_inputs(with_bias: bool = True):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(11, 5, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(13, 5, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(13, dtype=torch.float64, generator=g, requires_grad=True) if with_bias else None
    t = torch.randint(0, 13, (11,), generator=g)
    t[[1, 6]] = -100
    return x, w, b, t


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_ops_equal_full_logits_and_pass_gradcheck(reduction: str) -> None:
    x, w, b, t = _ce_inputs()
    upstream = torch.randn(11, dtype=torch.float64) if reduction == "none" else torch.tensor(0.7)
    ours = linear_cross_entropy(x, w, t, b, reduction=reduction, chunk_size=4)
    ref = F.cross_entropy(F.linear(x, w, b), t, reduction=reduction)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    got = torch.autograd.grad(ours, (x, w, b), upstream.double())
    want = torch.autograd.grad(ref, (x, w, b), upstream.double())
    for a, r in zip(got, want):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(
        lambda x, w, b: linear_cross_entropy(x, w, t, b, reduction=reduction, chunk_size=4),
        (x, w, b),
    )


def test_distillation_op_equals_full_logits_and_passes_gradcheck() -> None:
    x, w, b, t = _ce_inputs()
    g = torch.Generator().manual_seed(1)
    tx = torch.randn(11, 3, dtype=torch.float64, generator=g)
    tw = torch.randn(13, 3, dtype=torch.float64, generator=g)
    alpha, tau = 0.4, 1.7

    def ours(x, w, b):
        return linear_distillation_loss(
            x, w, tx, tw, t, b, alpha=alpha, temperature=tau, chunk_size=4
        )[0]

    s, m = F.linear(x, w, b), t != -100
    ref = (1 - alpha) * F.cross_entropy(s, t) + alpha * tau**2 * F.kl_div(
        F.log_softmax(s[m] / tau, -1),
        F.log_softmax((tx @ tw.T)[m] / tau, -1),
        log_target=True,
        reduction="batchmean",
    )
    torch.testing.assert_close(ours(x, w, b), ref, rtol=1e-12, atol=1e-12)
    for a, r in zip(
        torch.autograd.grad(ours(x, w, b), (x, w, b)), torch.autograd.grad(ref, (x, w, b))
    ):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(ours, (x, w, b))


def test_ops_pass_opcheck() -> None:
    """Schema, fake (meta) implementation and autograd registration agree with the kernels."""
    x, w, b, t = _ce_inputs()
    tests = ("test_schema", "test_autograd_registration", "test_faketensor")
    ops = torch.ops.tying
    args = (x, w, b, t, -100, 4, torch.float64)
    torch.library.opcheck(ops.linear_cross_entropy_rows.default, args, test_utils=tests)
    fused = (x, w, b, t, -100, "mean", 4, torch.float64, True, True, True)
    torch.library.opcheck(ops.linear_cross_entropy_fused.default, fused, test_utils=tests)
    safe = torch.where(t != -100, t, 0)
    distill = (x, w, b, x.detach(), w.detach(), None, safe, t != -100, 2.0, 0.5, 2.0, "sum", 4)
    torch.library.opcheck(
        ops.linear_distillation_fused.default,
        (*distill, torch.float64, True, True, False),
        test_utils=tests,
    )


@needs_compiler
def test_compiled_row_kernels_equal_eager_ones(monkeypatch) -> None:
    """`ce_rows` and `distill_rows` compiled (whole chunks) give the eager values and gradients
    (row blocks, in place) to float32 rounding."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(40, 300, generator=g) * 4
    zt = torch.randn(40, 300, generator=g) * 4
    bias = torch.randn(300, generator=g)
    t = torch.randint(0, 300, (40,), generator=g)
    valid = torch.rand(40, generator=g) > 0.2
    scale = torch.tensor(0.3)
    kernels = kernels_module.CompiledKernels("test")
    monkeypatch.setattr(loss_module, "kernels", kernels)
    monkeypatch.setattr(loss_module, "compiles_on", lambda device: True)  # as on a GPU
    monkeypatch.setattr(loss_module, "_LOGITS_PER_BLOCK", 8 * 300)  # eager: 5 row blocks
    monkeypatch.setenv(kernels_module.COMPILE_ENV, "0")
    eager_ce = loss_module.run_rows(loss_module.ce_rows, z.clone(), (t, valid, scale), (bias,))
    eager_kl = loss_module.run_rows(
        kl_module.distill_rows,
        z.clone(),
        (zt.clone(), t, valid, scale),
        (bias, None, 2.0, 0.5, 2.0),
    )
    monkeypatch.setenv(kernels_module.COMPILE_ENV, "1")
    monkeypatch.setattr(kernels_module, "COMPILE_MIN_ELEMENTS", 0)
    z0, zt0 = z.clone(), zt.clone()
    ce = loss_module.run_rows(loss_module.ce_rows, z, (t, valid, scale), (bias,))
    kl = loss_module.run_rows(
        kl_module.distill_rows, z, (zt, t, valid, scale), (bias, None, 2.0, 0.5, 2.0)
    )
    assert len(kernels._compiled) == 2 and not kernels._failed
    assert torch.equal(z, z0) and torch.equal(zt, zt0)  # compiled: the inputs are left alone
    for got, want in zip((*ce, *kl), (*eager_ce, *eager_kl)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
