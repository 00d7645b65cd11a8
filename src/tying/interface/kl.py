"""Chunked distillation losses between two linear heads, never holding the N×V logits.

For student head inputs x (N×d), a student projection W (V×d, `nn.Linear`
layout, bias b), teacher head inputs x_t (N×d_t), a teacher projection W_t
(V×d_t, bias b_t) and a temperature τ > 0, per token n:

    s_n = x_n W^T + b,  t_n = x_t,n W_t^T + b_t                  (logits)
    p_n = softmax(t_n / τ),  q_n = softmax(s_n / τ)
    KL_n = Σ_v p_n,v (log p_n,v − log q_n,v)                      (nats)
    CE_n = logsumexp(s_n) − s_n[target_n]                          (nats, τ = 1)

`linear_kl_divergence` returns mean KL_n; `linear_distillation_loss` returns
(loss, CE, KL) with loss = w_ce · mean CE_n + w_kl · mean KL_n, the means over
the valid tokens. Both heads' logits are formed `chunk_size` tokens at a time
and the student's gradient is computed in the same pass, as in
`tying.interface.loss.linear_cross_entropy`:

    ∂loss_n/∂s_n = w_ce (softmax(s_n) − onehot(target_n)) + (w_kl / τ) (q_n − p_n)

so at most one chunk of logits per head is alive. The teacher gets no
gradient (its inputs are detached). Under `torch.autocast` the products run in
the autocast dtype (e.g. bf16); log-softmax, the sums and the weight-gradient
accumulator stay in float32 (float64 for float64 inputs).

The pass is one opaque custom operator, `tying::linear_distillation_fused`,
returning (loss, CE, KL, G_x, G_W, G_b) for an upstream gradient of 1; its
registered backward scales G by the upstream gradient, so `torch.compile` sees a
single node (see `tying.interface.loss`). The elementwise work on each chunk
(`distill_rows`) runs compiled or eagerly through `tying.kernels`, as there.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tying.interface.loss import (
    _accumulate_dtype,
    _chunk_grads,
    _compute_dtype,
    _grad_buffers,
    _or_empty,
    _out_dtype,
    _scaled,
    check_ids,
    default_chunk_size,
    run_rows,
)

_REDUCTIONS = ("mean", "sum")


def distill_rows(
    z: Tensor,
    teacher_z: Tensor,
    targets: Tensor | None,
    valid: Tensor,
    scale: Tensor | None,
    bias: Tensor | None,
    teacher_bias: Tensor | None,
    temperature: float,
    w_ce: float,
    w_kl: float,
    inplace: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Per-row CE and KL of a block of logits and, with `scale`, the gradient of the loss.

    In a = float32 (float64 for float64 logits), s = z + b, t = z_t + b_t,
    log q = log_softmax(s/τ), log p = log_softmax(t/τ):

        CE_n = logsumexp(s_n) − s_n[target_n]            (0 without targets)
        KL_n = Σ_v p_n,v (log p_n,v − log q_n,v)
        grad_n = w_n · (w_ce (softmax(s_n) − onehot(target_n)) + (w_kl/τ) (q_n − p_n)),
        w_n = scale_n · valid_n

    both 0 on invalid rows. A pure function of its inputs unless `inplace` (then `z` and
    `teacher_z` may be overwritten): the same code runs eagerly and under `torch.compile`.

    Args:
        z: (r, V) student logits in the compute dtype.
        teacher_z: (r, V) teacher logits in the compute dtype.
        targets: (r,) ids for the CE term, or None (then CE is 0 and w_ce must be 0).
        valid: (r,) bool.
        scale: None (values only), or the upstream gradient per row, () or (r,) in a.
        bias, teacher_bias: optional (V,) biases in a.
        temperature: τ.
        w_ce, w_kl: the weights of the two terms in the loss.
        inplace: work in the storage of `z` and `teacher_z` where their dtype is a.

    Returns:
        ((r,) CE, (r,) KL in nats and a, (r, V) gradient in the dtype of z or None).
    """
    acc = _accumulate_dtype(z.dtype)
    inv_tau = 1.0 / temperature
    s = z if inplace and z.dtype == acc else z.to(acc, copy=True)
    t = teacher_z if inplace and teacher_z.dtype == acc else teacher_z.to(acc, copy=True)
    if bias is not None:
        s.add_(bias)
    if teacher_bias is not None:
        t.add_(teacher_bias)
    ce_grad = None
    if targets is None:
        ce = torch.zeros(s.shape[0], dtype=acc, device=s.device)
    else:
        lse = s.logsumexp(dim=1)
        ce = torch.where(valid, lse - s.gather(1, targets.unsqueeze(1)).squeeze(1), 0.0)
        if scale is not None and w_ce != 0.0:
            ce_grad = (s - lse.unsqueeze(1)).exp_()
            ce_grad[torch.arange(s.shape[0], device=s.device), targets] -= 1.0
            ce_grad.mul_(w_ce)
    s.mul_(inv_tau)
    t.mul_(inv_tau)
    log_q = s.sub_(s.logsumexp(dim=1, keepdim=True))
    log_p = t.sub_(t.logsumexp(dim=1, keepdim=True))
    p = log_p.exp()
    kl = torch.where(valid, (p * (log_p - log_q)).sum(dim=1), 0.0)
    if scale is None:
        return ce, kl, None
    grad = log_q.exp_().sub_(p).mul_(w_kl * inv_tau)
    if ce_grad is not None:
        grad.add_(ce_grad)
    grad.mul_((scale * valid).unsqueeze(1))
    return ce, kl, grad.to(z.dtype)


@torch.library.custom_op(
    "tying::linear_distillation_fused",
    mutates_args=(),
    schema=(
        "(Tensor x, Tensor weight, Tensor? bias, Tensor teacher_x, Tensor teacher_weight, "
        "Tensor? teacher_bias, Tensor? targets, Tensor valid, float temperature, float w_ce, "
        "float w_kl, str reduction, int chunk_size, ScalarType compute_dtype, bool need_x, "
        "bool need_w, bool need_b) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)"
    ),
)
def _distill_fused(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    teacher_x: Tensor,
    teacher_weight: Tensor,
    teacher_bias: Tensor | None,
    targets: Tensor | None,
    valid: Tensor,
    temperature: float,
    w_ce: float,
    w_kl: float,
    reduction: str,
    chunk_size: int,
    compute_dtype: torch.dtype,
    need_x: bool,
    need_w: bool,
    need_b: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """loss = w_ce·CE + w_kl·KL, CE, KL (means over the valid tokens, or sums) and the
    gradients of loss for an upstream gradient of 1, in one pass over the chunks.

    Returns:
        (loss, CE, KL: () in float32 (float64), G_x (N, d) in x's dtype, G_W (V, d) and
        G_b (V,) in the accumulate dtype); an absent gradient is an empty (0,) tensor.
    """
    n_tokens = x.shape[0]
    acc = _accumulate_dtype(compute_dtype)
    n_valid = valid.sum().to(acc)
    need_b = need_b and bias is not None
    with_grad = need_x or need_w or need_b
    grad_x, grad_w, grad_b = _grad_buffers(x, weight, acc, need_x, need_w, need_b)
    denom = n_valid if reduction == "mean" else torch.ones((), dtype=acc, device=x.device)
    scale = 1.0 / denom if with_grad else None
    xc, wc = x.to(compute_dtype), weight.to(compute_dtype)
    txc, twc = teacher_x.to(compute_dtype), teacher_weight.to(compute_dtype)
    b = None if bias is None else bias.to(acc)
    tb = None if teacher_bias is None else teacher_bias.to(acc)
    ces = torch.empty(n_tokens, dtype=acc, device=x.device)
    kls = torch.empty(n_tokens, dtype=acc, device=x.device)
    with torch.autocast(x.device.type, enabled=False):
        for start in range(0, n_tokens, chunk_size):
            rows = slice(start, min(start + chunk_size, n_tokens))
            xs = xc[rows]
            ces[rows], kls[rows], grad = run_rows(
                distill_rows,
                xs @ wc.T,
                (
                    txc[rows] @ twc.T,
                    None if targets is None else targets[rows],
                    valid[rows],
                    scale,
                ),
                (b, tb, temperature, w_ce, w_kl),
            )
            if with_grad:
                _chunk_grads(grad, xs, wc, grad_x, grad_w, grad_b, rows)
            del grad
    ce, kl = ces.sum() / denom, kls.sum() / denom
    loss = w_ce * ce + w_kl * kl
    out = _out_dtype(x)
    return (
        loss.to(out),
        ce.to(out),
        kl.to(out),
        _or_empty(grad_x, x, x.dtype),
        _or_empty(grad_w, x, acc),
        _or_empty(grad_b, x, acc),
    )


@_distill_fused.register_fake
def _distill_fused_fake(
    x,
    weight,
    bias,
    teacher_x,
    teacher_weight,
    teacher_bias,
    targets,
    valid,
    temperature,
    w_ce,
    w_kl,
    reduction,
    chunk_size,
    compute_dtype,
    need_x,
    need_w,
    need_b,
):
    acc = _accumulate_dtype(compute_dtype)
    out = _out_dtype(x)
    need_b = need_b and bias is not None
    return (
        x.new_empty((), dtype=out),
        x.new_empty((), dtype=out),
        x.new_empty((), dtype=out),
        x.new_empty(x.shape if need_x else (0,)),
        x.new_empty(weight.shape if need_w else (0,), dtype=acc),
        x.new_empty((weight.shape[0] if need_b else 0,), dtype=acc),
    )


def _distill_setup(ctx, inputs, output) -> None:
    weight, bias = inputs[1], inputs[2]
    ctx.save_for_backward(*output[3:])
    ctx.needs = (inputs[14], inputs[15], inputs[16] and bias is not None)
    ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)


def _distill_backward(ctx, grad_out: Tensor, *_: Tensor):
    gx, gw, gb = ctx.saved_tensors
    need_x, need_w, need_b = ctx.needs
    w_dtype, b_dtype = ctx.dtypes
    return (
        _scaled(gx, grad_out, gx.dtype) if need_x else None,
        _scaled(gw, grad_out, w_dtype) if need_w else None,
        _scaled(gb, grad_out, b_dtype) if need_b else None,
        *[None] * 14,
    )


_distill_fused.register_autograd(_distill_backward, setup_context=_distill_setup)


def linear_distillation_loss(
    x: Tensor,
    weight: Tensor,
    teacher_x: Tensor,
    teacher_weight: Tensor,
    targets: Tensor | None = None,
    bias: Tensor | None = None,
    teacher_bias: Tensor | None = None,
    *,
    alpha: float = 1.0,
    temperature: float = 1.0,
    ignore_index: int = -100,
    valid: Tensor | None = None,
    reduction: str = "mean",
    chunk_size: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(loss, CE, KL) with loss = (1 − α)·CE + α·τ²·KL(teacher_τ ‖ student_τ), chunked.

    CE is the student's next-token cross-entropy at τ = 1 against `targets`, KL the
    divergence of the student's tempered distribution from the teacher's (module
    docstring); both are means over the valid tokens (or sums). Only `loss` carries a
    gradient (to x, weight and bias); CE and KL are returned for logging. The value and
    gradient equal those of the same formula on full logits.

    Args:
        x: student head inputs, (N, d) or (..., d).
        weight: student projection, (V, d).
        teacher_x: teacher head inputs for the same N tokens, (N, d_t) or (..., d_t).
        teacher_weight: teacher projection, (V, d_t).
        targets: (N,) or (...) next-token ids, or None when α = 1 (no CE term).
        bias, teacher_bias: optional (V,) output biases.
        alpha: α in [0, 1], the weight of the KL term.
        temperature: τ > 0.
        ignore_index: targets equal to this are skipped by both terms.
        valid: optional (N,) bool mask of the tokens that count (combined with targets).
        reduction: "mean" or "sum".
        chunk_size: tokens per chunk (default: ≤ 96 MiB of logits per head and chunk).

    Returns:
        (loss, CE, KL): scalars in nats, float32 (float64 for float64 x).

    Raises:
        ValueError: mismatched shapes or vocabularies, α outside [0, 1], τ ≤ 0,
            no targets with α < 1, or an unknown reduction.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if targets is None and alpha < 1.0:
        raise ValueError(f"alpha={alpha} < 1 weights a cross-entropy term: pass targets")
    if weight.dim() != 2 or teacher_weight.dim() != 2:
        raise ValueError(
            f"weights must be (V, d), got {tuple(weight.shape)} and {tuple(teacher_weight.shape)}"
        )
    if weight.shape[0] != teacher_weight.shape[0]:
        raise ValueError(
            f"student and teacher vocabularies differ: V={weight.shape[0]} vs "
            f"{teacher_weight.shape[0]}; distillation needs the same tokenizer"
        )
    if x.shape[-1] != weight.shape[1] or teacher_x.shape[-1] != teacher_weight.shape[1]:
        raise ValueError(
            f"hidden sizes do not match the projections: x {tuple(x.shape)} vs W "
            f"{tuple(weight.shape)}, teacher_x {tuple(teacher_x.shape)} vs W_t "
            f"{tuple(teacher_weight.shape)}"
        )
    x2 = x.reshape(-1, weight.shape[1])
    t2 = teacher_x.reshape(-1, teacher_weight.shape[1]).detach()
    n = x2.shape[0]
    if t2.shape[0] != n:
        raise ValueError(f"student and teacher hold different token counts: {n} vs {t2.shape[0]}")
    mask = torch.ones(n, dtype=torch.bool, device=x.device)
    if valid is not None:
        if valid.numel() != n:
            raise ValueError(f"valid holds {valid.numel()} tokens, x holds {n}")
        mask = valid.reshape(-1).to(device=x.device, dtype=torch.bool)
    safe_targets = None
    if targets is not None:
        t = targets.reshape(-1)
        if t.shape[0] != n:
            raise ValueError(f"targets hold {t.shape[0]} tokens, x holds {n}")
        if t.is_floating_point():
            raise ValueError(f"targets must be an integer tensor, got {t.dtype}")
        t = t.long()
        mask = mask & (t != ignore_index)
        check_ids(t, weight.shape[0], "target id", valid=mask)
        safe_targets = torch.where(mask, t, torch.zeros_like(t))
    compute_dtype = _compute_dtype(x2)
    chunk = chunk_size or max(16, default_chunk_size(weight.shape[0], compute_dtype) // 2)
    tb = None if teacher_bias is None else teacher_bias.detach()
    grad_on = torch.is_grad_enabled()
    loss, ce, kl, _, _, _ = _distill_fused(
        x2,
        weight,
        bias,
        t2,
        teacher_weight.detach(),
        tb,
        safe_targets,
        mask,
        float(temperature),
        1.0 - alpha,
        alpha * temperature**2,
        reduction,
        chunk,
        compute_dtype,
        grad_on and x2.requires_grad,
        grad_on and weight.requires_grad,
        grad_on and bias is not None and bias.requires_grad,
    )
    return loss, ce.detach(), kl.detach()


def linear_kl_divergence(
    x: Tensor,
    weight: Tensor,
    teacher_x: Tensor,
    teacher_weight: Tensor,
    bias: Tensor | None = None,
    teacher_bias: Tensor | None = None,
    *,
    temperature: float = 1.0,
    valid: Tensor | None = None,
    reduction: str = "mean",
    chunk_size: int | None = None,
) -> Tensor:
    """KL(teacher_τ ‖ student_τ) of two linear heads, chunked over tokens (nats per token).

    Equals, in value and gradient (to x, weight, bias),
    `F.kl_div(log_softmax(s/τ), log_softmax(t/τ), log_target=True, reduction="sum") / N`
    on full logits s = x W^T + b, t = teacher_x W_t^T + b_t (no τ² factor).
    Arguments as in `linear_distillation_loss`.
    """
    loss, _, _ = linear_distillation_loss(
        x,
        weight,
        teacher_x,
        teacher_weight,
        None,
        bias,
        teacher_bias,
        alpha=1.0,
        temperature=temperature,
        valid=valid,
        reduction=reduction,
        chunk_size=chunk_size,
    )
    return loss / temperature**2 if temperature != 1.0 else loss
