"""Chunked linear cross-entropy: next-token loss without the N×V logits.

For hidden states x (N×d), a vocabulary projection W (V×d, `nn.Linear` layout),
an optional bias b (V) and targets t (N),

    loss_n = logsumexp(x_n W^T + b) - (x_n W^T + b)[t_n]

When V ≫ d the logits x W^T dominate both memory (N·V floats, twice over with
their gradient) and time. Here they are formed `chunk_size` tokens at a time.
For `reduction="mean"` or `"sum"` the gradient of each chunk is computed in the
same pass as its loss (the loss is linear in the per-token terms, so the
scalar upstream gradient simply rescales the stored gradients afterwards):
3 matrix products per chunk, as for the full path, and at most
chunk_size × V logits alive at any time. `reduction="none"` keeps only the
per-token log-sum-exp and recomputes each chunk in the backward pass.

Under `torch.autocast` the two large products run in the autocast dtype (e.g.
bf16); log-sum-exp, softmax and the weight-gradient accumulator stay in
float32.
"""

from __future__ import annotations

import torch
from torch import Tensor

_REDUCTIONS = ("mean", "sum", "none")
# A chunk's logits take at most this many bytes in the compute dtype (2,003 tokens in bf16,
# 1,001 in fp32 at V = 50,257): large enough for efficient products and few weight-gradient
# accumulations, small next to the N×V logits of the full path.
_DEFAULT_LOGIT_BYTES_PER_CHUNK = 192 << 20
# Softmax work runs on row blocks of at most this many logits (24 MiB fp32), so that its
# passes (max, exp, sum, scale) stay in the last-level cache of a CPU.
_LOGITS_PER_BLOCK = 6 << 20


def default_chunk_size(vocab_size: int, dtype: torch.dtype = torch.float32) -> int:
    """Tokens per chunk so that one chunk's logits take ≤ 192 MiB in `dtype` (≥ 16 tokens)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return max(16, _DEFAULT_LOGIT_BYTES_PER_CHUNK // (max(vocab_size, 1) * itemsize))


def _compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype the large products run in: the autocast dtype if autocast is on."""
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type) and x.dtype in (
        torch.float32,
        torch.float16,
        torch.bfloat16,
    ):
        return torch.get_autocast_dtype(device_type)
    return x.dtype


def _accumulate_dtype(compute_dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if compute_dtype == torch.float64 else torch.float32


def _softmax_rows_(
    logits: Tensor,
    targets: Tensor,
    valid: Tensor,
    bias: Tensor | None,
    row_scale: Tensor | None,
) -> Tensor:
    """Per-row loss of a chunk's logits; with `row_scale`, turn the logits into their gradient.

    Works in row blocks of ≤ 6·2^20 logits, in float32 (float64 for float64 logits):
    loss_n = lse_n − logit_n[t_n] with lse = max + log Σ exp(logit − max). With
    `row_scale` (n,), `logits` is overwritten in place (in its own dtype) with
    row_scale_n · (softmax_n − onehot(t_n)), zero on ignored rows.

    Args:
        logits: (n, V), the chunk's logits in the compute dtype (overwritten if row_scale is given).
        targets: (n,) ids in [0, V) (ignored rows hold any valid id).
        valid: (n,) bool, False for ignored rows.
        bias: optional (V,) output bias, added here.
        row_scale: optional (n,) upstream gradient per row.

    Returns:
        (n,) losses in nats (0 on ignored rows), float32 or float64.
    """
    n, V = logits.shape
    acc = _accumulate_dtype(logits.dtype)
    block = max(8, _LOGITS_PER_BLOCK // max(V, 1))
    losses = torch.empty(n, dtype=acc, device=logits.device)
    for b0 in range(0, n, block):
        b1 = min(b0 + block, n)
        raw = logits[b0:b1]  # `logits` is the caller's temporary: safe to overwrite
        lf = raw.to(acc) if raw.dtype != acc else raw  # a float32 copy of bf16 logits
        if bias is not None:
            lf.add_(bias.to(acc))
        t = targets[b0:b1]
        v = valid[b0:b1]
        target_logit = lf.gather(1, t.unsqueeze(1)).squeeze(1)
        row_max = lf.amax(dim=1)
        lf.sub_(row_max.unsqueeze(1)).exp_()
        sums = lf.sum(dim=1)
        lse = row_max + sums.log()
        losses[b0:b1] = torch.where(v, lse - target_logit, torch.zeros_like(lse))
        if row_scale is None:
            continue
        scale = row_scale[b0:b1].to(acc) * v
        lf.mul_((scale / sums).unsqueeze(1))
        lf[torch.arange(b1 - b0, device=lf.device), t] -= scale
        if lf is not raw:
            raw.copy_(lf)
    return losses


def _chunk_grads(
    g: Tensor,
    xs: Tensor,
    wc: Tensor,
    grad_x: Tensor | None,
    grad_w: Tensor | None,
    grad_b: Tensor | None,
    rows: slice,
) -> None:
    """Add one chunk's contributions: grad_x[rows] = g W, grad_w += g^T x, grad_b += Σ g."""
    if grad_b is not None:
        grad_b += g.sum(0, dtype=grad_b.dtype)
    if grad_x is not None:
        grad_x[rows] = (g @ wc).to(grad_x.dtype)
    if grad_w is not None:
        if g.dtype == grad_w.dtype:
            grad_w.addmm_(g.T, xs)
        else:
            grad_w += (g.T @ xs).to(grad_w.dtype)


class _LinearCrossEntropy(torch.autograd.Function):
    """Autograd function behind `linear_cross_entropy` (see the module docstring)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        targets: Tensor,
        ignore_index: int,
        reduction: str,
        chunk_size: int,
        compute_dtype: torch.dtype,
    ) -> Tensor:
        n_tokens = x.shape[0]
        valid = targets != ignore_index
        safe_targets = torch.where(valid, targets, torch.zeros_like(targets))
        n_valid = valid.sum()
        xc = x.to(compute_dtype)
        wc = weight.to(compute_dtype)
        acc = _accumulate_dtype(compute_dtype)
        losses = torch.empty(n_tokens, dtype=acc, device=x.device)

        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = bias is not None and ctx.needs_input_grad[2]
        fused = reduction != "none" and (need_x or need_w or need_b)
        row_scale = grad_x = grad_w = grad_b = None
        if fused:
            scale = 1.0 / n_valid.to(acc) if reduction == "mean" else torch.ones((), dtype=acc)
            row_scale = scale.to(x.device).expand(n_tokens)
            grad_x = torch.empty_like(x) if need_x else None
            grad_w = torch.zeros(weight.shape, dtype=acc, device=x.device) if need_w else None
            grad_b = torch.zeros(weight.shape[0], dtype=acc, device=x.device) if need_b else None

        for start in range(0, n_tokens, chunk_size):
            rows = slice(start, min(start + chunk_size, n_tokens))
            xs = xc[rows]
            logits = xs @ wc.T
            losses[rows] = _softmax_rows_(
                logits,
                safe_targets[rows],
                valid[rows],
                bias,
                row_scale[rows] if fused else None,
            )
            if fused:
                _chunk_grads(logits, xs, wc, grad_x, grad_w, grad_b, rows)

        if reduction == "mean":
            out = losses.sum() / n_valid.to(acc)
        elif reduction == "sum":
            out = losses.sum()
        else:
            out = losses
        out = out.to(x.dtype if x.dtype == torch.float64 else torch.float32)

        ctx.has_bias = bias is not None
        ctx.fused = fused
        if fused:
            ctx.save_for_backward(grad_x, grad_w, grad_b)
            ctx.dtypes = (weight.dtype, bias.dtype if bias is not None else None)
        else:
            ctx.save_for_backward(x, weight, bias, safe_targets, valid)
            ctx.chunk_size = chunk_size
            ctx.compute_dtype = compute_dtype
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        none5 = [None] * 5
        if ctx.fused:
            grad_x, grad_w, grad_b = ctx.saved_tensors
            w_dtype, b_dtype = ctx.dtypes
            gx = (grad_x * grad_out.to(grad_x.dtype)) if grad_x is not None else None
            gw = (grad_w * grad_out.to(grad_w.dtype)).to(w_dtype) if grad_w is not None else None
            gb = (grad_b * grad_out.to(grad_b.dtype)).to(b_dtype) if grad_b is not None else None
            return (gx, gw, gb, *none5)
        return (*_recompute_backward(ctx, grad_out), *none5)


def _recompute_backward(
    ctx, grad_out: Tensor
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Backward of `reduction="none"`: recompute each chunk, weighting rows by grad_out."""
    x, weight, bias, safe_targets, valid = ctx.saved_tensors
    compute_dtype = ctx.compute_dtype
    acc = _accumulate_dtype(compute_dtype)
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    need_b = ctx.has_bias and ctx.needs_input_grad[2]
    xc, wc = x.to(compute_dtype), weight.to(compute_dtype)
    grad_x = torch.empty_like(x) if need_x else None
    grad_w = torch.zeros(weight.shape, dtype=acc, device=x.device) if need_w else None
    grad_b = torch.zeros(weight.shape[0], dtype=acc, device=x.device) if need_b else None
    with torch.autocast(x.device.type, enabled=False):
        for start in range(0, x.shape[0], ctx.chunk_size):
            rows = slice(start, min(start + ctx.chunk_size, x.shape[0]))
            logits = xc[rows] @ wc.T
            _softmax_rows_(logits, safe_targets[rows], valid[rows], bias, grad_out[rows])
            _chunk_grads(logits, xc[rows], wc, grad_x, grad_w, grad_b, rows)
    return (
        grad_x,
        grad_w.to(weight.dtype) if grad_w is not None else None,
        grad_b.to(bias.dtype) if grad_b is not None else None,
    )


def linear_cross_entropy(
    x: Tensor,
    weight: Tensor,
    targets: Tensor,
    bias: Tensor | None = None,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
    chunk_size: int | None = None,
) -> Tensor:
    """Cross-entropy of `x @ weight.T + bias` against `targets`, never holding all N×V logits.

    Value and gradients equal `F.cross_entropy(F.linear(x, weight, bias), targets,
    ignore_index=ignore_index, reduction=reduction)` (to floating-point rounding).

    Args:
        x: hidden states, shape (N, d) or (..., d) (flattened).
        weight: vocabulary projection, shape (V, d) (`nn.Linear.weight` layout).
        targets: token ids, shape (N,) or (...), values in [0, V) or `ignore_index`.
        bias: optional output bias, shape (V,).
        ignore_index: targets equal to this contribute neither loss nor gradient.
        reduction: "mean" (over non-ignored tokens; NaN if there are none, like
            `F.cross_entropy`), "sum" or "none" (per-token losses, shape (N,)).
        chunk_size: tokens per chunk; default keeps ≤ 192 MiB of logits alive.

    Returns:
        The loss in nats: a scalar, or (N,) for `reduction="none"`; float32
        (float64 if `x` is float64).

    Raises:
        ValueError: on mismatched shapes, an unknown reduction, or a target outside [0, V).
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be (V, d), got shape {tuple(weight.shape)}")
    vocab_size, d_model = weight.shape
    if x.shape[-1] != d_model:
        raise ValueError(
            f"hidden size mismatch: x has last dimension {x.shape[-1]}, the projection expects d={d_model}"
        )
    x2 = x.reshape(-1, d_model)
    t = targets.reshape(-1)
    if t.shape[0] != x2.shape[0]:
        raise ValueError(
            f"targets hold {t.shape[0]} tokens but hidden holds {x2.shape[0]} (shapes "
            f"{tuple(targets.shape)} and {tuple(x.shape)})"
        )
    if t.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise ValueError(f"targets must be an integer tensor, got {t.dtype}")
    t = t.long()
    if bias is not None and bias.shape != (vocab_size,):
        raise ValueError(f"bias must have shape ({vocab_size},), got {tuple(bias.shape)}")
    check = t[t != ignore_index]
    if check.numel() and (int(check.min()) < 0 or int(check.max()) >= vocab_size):
        bad = int(check.max()) if int(check.max()) >= vocab_size else int(check.min())
        raise IndexError(
            f"target id {bad} is outside the vocabulary [0, {vocab_size}) "
            f"(ignore_index={ignore_index})"
        )
    compute_dtype = _compute_dtype(x2)
    chunk = chunk_size or default_chunk_size(vocab_size, compute_dtype)
    with torch.autocast(x.device.type, enabled=False):
        out = _LinearCrossEntropy.apply(
            x2, weight, bias, t, ignore_index, reduction, chunk, compute_dtype
        )
    if reduction == "none":
        return out.reshape(targets.shape)
    return out
