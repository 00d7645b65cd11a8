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
"""

from __future__ import annotations

import torch
from torch import Tensor

from tying.interface.loss import (
    _LOGITS_PER_BLOCK,
    _accumulate_dtype,
    _chunk_grads,
    _compute_dtype,
    default_chunk_size,
)

_REDUCTIONS = ("mean", "sum")


def _distill_rows_(
    logits: Tensor,
    teacher_logits: Tensor,
    targets: Tensor | None,
    valid: Tensor,
    bias: Tensor | None,
    teacher_bias: Tensor | None,
    temperature: float,
    weights: tuple[float, float],
    row_scale: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """Per-row CE and KL of one chunk; with `row_scale`, turn `logits` into their gradient.

    Works in row blocks of ≤ 6·2^20 logits in float32 (float64 for float64 logits).

    Args:
        logits: (n, V) student logits in the compute dtype (overwritten if row_scale is given).
        teacher_logits: (n, V) teacher logits (read only).
        targets: (n,) ids for the CE term, or None (then CE is 0 and w_ce must be 0).
        valid: (n,) bool.
        bias, teacher_bias: optional (V,) biases, added here.
        temperature: τ.
        weights: (w_ce, w_kl), the weights of the gradient terms.
        row_scale: optional (n,) upstream gradient per row.

    Returns:
        ((n,) CE, (n,) KL), nats, zero on invalid rows.
    """
    n, V = logits.shape
    acc = _accumulate_dtype(logits.dtype)
    block = max(8, _LOGITS_PER_BLOCK // max(V, 1))
    ce_out = torch.zeros(n, dtype=acc, device=logits.device)
    kl_out = torch.empty(n, dtype=acc, device=logits.device)
    inv_tau = 1.0 / temperature
    w_ce, w_kl = weights
    for b0 in range(0, n, block):
        b1 = min(b0 + block, n)
        raw = logits[b0:b1]
        s = raw.to(acc) if raw.dtype != acc else raw.clone()
        t = teacher_logits[b0:b1].to(acc)
        if bias is not None:
            s.add_(bias.to(acc))
        if teacher_bias is not None:
            t.add_(teacher_bias.to(acc))
        v = valid[b0:b1]
        grad = None
        if targets is not None:
            tgt = targets[b0:b1]
            lse = s.logsumexp(dim=1)
            ce = lse - s.gather(1, tgt.unsqueeze(1)).squeeze(1)
            ce_out[b0:b1] = torch.where(v, ce, torch.zeros_like(ce))
            if row_scale is not None and w_ce != 0.0:
                grad = (s - lse.unsqueeze(1)).exp_()
                grad[torch.arange(b1 - b0, device=s.device), tgt] -= 1.0
                grad.mul_(w_ce)
        s.mul_(inv_tau)
        t.mul_(inv_tau)
        log_q = s.sub_(s.logsumexp(dim=1, keepdim=True))
        log_p = t.sub_(t.logsumexp(dim=1, keepdim=True))
        p = log_p.exp()
        kl = (p * (log_p - log_q)).sum(dim=1)
        kl_out[b0:b1] = torch.where(v, kl, torch.zeros_like(kl))
        if row_scale is None:
            continue
        kl_grad = log_q.exp_().sub_(p).mul_(w_kl * inv_tau)
        grad = kl_grad if grad is None else grad.add_(kl_grad)
        grad.mul_((row_scale[b0:b1].to(acc) * v).unsqueeze(1))
        raw.copy_(grad)
    return ce_out, kl_out


class _LinearDistill(torch.autograd.Function):
    """Autograd function behind `linear_distillation_loss` (see the module docstring)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        teacher_x: Tensor,
        teacher_weight: Tensor,
        teacher_bias: Tensor | None,
        targets: Tensor | None,
        valid: Tensor,
        temperature: float,
        weights: tuple[float, float],
        reduction: str,
        chunk_size: int,
        compute_dtype: torch.dtype,
    ) -> tuple[Tensor, Tensor, Tensor]:
        n_tokens = x.shape[0]
        acc = _accumulate_dtype(compute_dtype)
        n_valid = valid.sum().to(acc)
        xc, wc = x.to(compute_dtype), weight.to(compute_dtype)
        txc, twc = teacher_x.to(compute_dtype), teacher_weight.to(compute_dtype)
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = bias is not None and ctx.needs_input_grad[2]
        fused = need_x or need_w or need_b
        row_scale = grad_x = grad_w = grad_b = None
        if fused:
            scale = 1.0 / n_valid if reduction == "mean" else torch.ones((), dtype=acc)
            row_scale = scale.to(x.device).expand(n_tokens)
            grad_x = torch.empty_like(x) if need_x else None
            grad_w = torch.zeros(weight.shape, dtype=acc, device=x.device) if need_w else None
            grad_b = torch.zeros(weight.shape[0], dtype=acc, device=x.device) if need_b else None
        ces = torch.empty(n_tokens, dtype=acc, device=x.device)
        kls = torch.empty(n_tokens, dtype=acc, device=x.device)
        for start in range(0, n_tokens, chunk_size):
            rows = slice(start, min(start + chunk_size, n_tokens))
            logits = xc[rows] @ wc.T
            teacher_logits = txc[rows] @ twc.T
            ces[rows], kls[rows] = _distill_rows_(
                logits,
                teacher_logits,
                None if targets is None else targets[rows],
                valid[rows],
                bias,
                teacher_bias,
                temperature,
                weights,
                row_scale[rows] if fused else None,
            )
            del teacher_logits
            if fused:
                _chunk_grads(logits, xc[rows], wc, grad_x, grad_w, grad_b, rows)
        denom = n_valid if reduction == "mean" else torch.ones((), dtype=acc)
        ce, kl = ces.sum() / denom, kls.sum() / denom
        loss = weights[0] * ce + weights[1] * kl
        out_dtype = x.dtype if x.dtype == torch.float64 else torch.float32
        ce, kl = ce.to(out_dtype), kl.to(out_dtype)
        ctx.mark_non_differentiable(ce, kl)
        ctx.fused = fused
        if fused:
            ctx.save_for_backward(grad_x, grad_w, grad_b)
            ctx.dtypes = (weight.dtype, bias.dtype if bias is not None else None)
        return loss.to(out_dtype), ce, kl

    @staticmethod
    def backward(ctx, grad_out: Tensor, _ce: Tensor, _kl: Tensor):  # type: ignore[override]
        rest = [None] * 10
        if not ctx.fused:
            return (None, None, None, *rest)
        grad_x, grad_w, grad_b = ctx.saved_tensors
        w_dtype, b_dtype = ctx.dtypes
        gx = (grad_x * grad_out.to(grad_x.dtype)) if grad_x is not None else None
        gw = (grad_w * grad_out.to(grad_w.dtype)).to(w_dtype) if grad_w is not None else None
        gb = (grad_b * grad_out.to(grad_b.dtype)).to(b_dtype) if grad_b is not None else None
        return (gx, gw, gb, *rest)


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
        check = t[mask]
        V = weight.shape[0]
        if check.numel() and (int(check.min()) < 0 or int(check.max()) >= V):
            bad = int(check.max()) if int(check.max()) >= V else int(check.min())
            raise IndexError(f"target id {bad} is outside the vocabulary [0, {V})")
        safe_targets = torch.where(mask, t, torch.zeros_like(t))
    compute_dtype = _compute_dtype(x2)
    chunk = chunk_size or max(16, default_chunk_size(weight.shape[0], compute_dtype) // 2)
    tb = None if teacher_bias is None else teacher_bias.detach()
    weights = (1.0 - alpha, alpha * temperature**2)
    with torch.autocast(x.device.type, enabled=False):
        return _LinearDistill.apply(
            x2,
            weight,
            bias,
            t2,
            teacher_weight.detach(),
            tb,
            safe_targets,
            mask,
            float(temperature),
            weights,
            reduction,
            chunk,
            compute_dtype,
        )


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
