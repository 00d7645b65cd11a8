"""Chunked linear cross-entropy: next-token loss without the N×V logits.

For hidden states x (N×d), a vocabulary projection W (V×d, `nn.Linear` layout),
an optional bias b (V) and targets t (N),

    z_n = x_n W^T + b                                   (logits, V)
    loss_n = logsumexp(z_n) - z_n[t_n]                  (nats)
    ∂loss_n/∂z_n = softmax(z_n) − onehot(t_n)

When V ≫ d the logits x W^T dominate both memory (N·V floats, twice over with
their gradient) and time. Here they are formed `chunk_size` tokens at a time.
For `reduction="mean"` or `"sum"` the gradient of each chunk is computed in the
same pass as its loss (the loss is linear in the per-token terms, so the
scalar upstream gradient g simply rescales the stored gradients afterwards:
∂(g·loss)/∂x = g·G_x and so on): 3 matrix products per chunk, as for the full
path, and at most chunk_size × V logits alive at any time. `reduction="none"`
keeps only the per-token losses and recomputes each chunk in the backward pass,
weighting row n by its upstream gradient g_n.

Under `torch.autocast` the two large products run in the autocast dtype (e.g.
bf16); log-sum-exp, softmax and the weight-gradient accumulator stay in
float32 (float64 for float64 inputs).

Both passes are opaque custom operators (`torch.library.custom_op`, namespace
`tying`): `torch.compile` sees one node with a known output shape and a backward
that only rescales the stored gradients, never the chunk loop or its in-place
writes (an `autograd.Function` that computes its gradients in `forward` and
returns them through `save_for_backward` trained with all-zero gradients under
`torch.compile` in torch 2.11). Inside an operator, the elementwise work on each
chunk of logits (`ce_rows`: bias, max, log-sum-exp, target logit, scaled
softmax − onehot) is one plain function, run compiled on large chunks on an
accelerator with a compiler (`tying.kernels`; one fused pass per chunk) and
eagerly otherwise: on the CPU on row blocks of ≤ 6·2^20 logits that stay in the
last-level cache (faster there than the compiled kernel).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tying.interface.token_ids import TokenIdError, check_ids  # noqa: F401 (TokenIdError's old home)
from tying.kernels import CompiledKernels

_REDUCTIONS = ("mean", "sum", "none")
# A chunk's logits take at most this many bytes in the compute dtype (2,003 tokens in bf16,
# 1,001 in fp32 at V = 50,257): large enough for efficient products and few weight-gradient
# accumulations, small next to the N×V logits of the full path.
_DEFAULT_LOGIT_BYTES_PER_CHUNK = 192 << 20
# Eager softmax work on the CPU runs on row blocks of at most this many logits (24 MiB fp32),
# so that its passes (max, exp, sum, scale) stay in the last-level cache.
_LOGITS_PER_BLOCK = 6 << 20

#: The elementwise kernels of the chunked losses (`ce_rows`, `tying.interface.kl.distill_rows`).
kernels = CompiledKernels("chunked loss")


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


def _out_dtype(x: Tensor) -> torch.dtype:
    """The dtype of the returned losses: float64 for float64 inputs, float32 otherwise."""
    return _accumulate_dtype(x.dtype)


def ce_rows(
    z: Tensor,
    targets: Tensor,
    valid: Tensor,
    scale: Tensor | None,
    bias: Tensor | None,
    inplace: bool,
) -> tuple[Tensor, Tensor | None]:
    """Per-row cross-entropy of a block of logits and, with `scale`, its gradient.

    With a = float32 (float64 for float64 logits), u = z + b in a, m = max_v u_v,
    s = Σ_v exp(u_v − m):

        loss_n = m_n + log s_n − u_n[t_n]                    (0 on ignored rows)
        grad_n = w_n · (exp(u_n − m_n)/s_n − onehot(t_n)),   w_n = scale_n · valid_n

    A pure function of its inputs unless `inplace` (then `z` may be overwritten): the
    same code runs eagerly and under `torch.compile` (`tying.kernels`).

    Args:
        z: (r, V) logits in the compute dtype.
        targets: (r,) ids in [0, V) (ignored rows hold any valid id).
        valid: (r,) bool, False for ignored rows.
        scale: None (loss only), or the upstream gradient per row: () or (r,) in a.
        bias: optional (V,) output bias in a.
        inplace: work in the storage of `z` where its dtype is a (eager callers).

    Returns:
        ((r,) losses in a, (r, V) gradient in the dtype of z, or None without `scale`).
    """
    acc = _accumulate_dtype(z.dtype)
    u = z if inplace and z.dtype == acc else z.to(acc, copy=True)
    if bias is not None:
        u.add_(bias)
    target_logit = u.gather(1, targets.unsqueeze(1)).squeeze(1)
    row_max = u.amax(dim=1, keepdim=True)
    e = u.sub_(row_max).exp_()
    sums = e.sum(dim=1)
    lse = row_max.squeeze(1) + sums.log()
    losses = torch.where(valid, lse - target_logit, torch.zeros_like(lse))
    if scale is None:
        return losses, None
    w = scale * valid
    grad = e.mul_((w / sums).unsqueeze(1))
    grad[torch.arange(grad.shape[0], device=grad.device), targets] -= w
    return losses, grad.to(z.dtype)


def compiles_on(device: torch.device) -> bool:
    """Whether the row kernels of the chunked losses may run compiled on `device`: on
    accelerators only. On the CPU the eager in-place row blocks are faster (2,048 tokens ×
    V 50,257, d 512, forward + backward on 2 cores: bf16 0.63 s eager vs 0.83 s compiled)."""
    return device.type != "cpu"


def run_rows(
    fn: Callable[..., tuple[Any, ...]],
    z: Tensor,
    row_args: tuple[Tensor | None, ...],
    args: tuple[Any, ...],
) -> tuple[Any, ...]:
    """`fn(z, *row_args, *args, inplace)` on a chunk of logits `z` (n, V), in one call or by rows.

    `fn` returns per-row outputs ((n,) each) and, last, a gradient (n, V) or None. Compiled
    (`compiles_on` the device and `kernels.enabled`): one call on the whole chunk; eager on an
    accelerator: one in-place call; eager on the CPU: calls on row blocks of ≤ 6·2^20 logits, in place,
    the gradient written into `z`. `row_args` are sliced by rows (None and 0-d tensors are
    passed whole); `args` are passed as they are.

    Returns:
        the per-row outputs (n,) and the (n, V) gradient (possibly `z` itself) or None.
    """
    n, V = z.shape
    if n >= 2 and compiles_on(z.device) and kernels.enabled(z.numel(), z.device):
        return kernels.call(fn, z, *row_args, *args, False)
    block = max(8, _LOGITS_PER_BLOCK // max(V, 1))
    if z.device.type != "cpu" or n <= block:
        return fn(z, *row_args, *args, True)
    parts = []
    with_grad = False
    for b0 in range(0, n, block):
        rows = slice(b0, min(b0 + block, n))
        sliced = tuple(a[rows] if a is not None and a.dim() else a for a in row_args)
        *values, grad = fn(z[rows], *sliced, *args, True)
        if grad is not None:
            with_grad = True
            if grad.data_ptr() != z[rows].data_ptr():
                z[rows] = grad
        parts.append(values)
    return (*(torch.cat(col) for col in zip(*parts)), z if with_grad else None)


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


#: On CUDA the vocabulary of the chunked products is padded to a multiple of this: a (n, V)
#: bf16 block whose rows are V = 50,257 elements long is not 16-byte aligned, and cuBLAS then
#: falls back to slower kernels for all three products of each chunk.
VOCAB_ALIGN = 64


def vocab_padding(vocab_size: int, device: torch.device) -> int:
    """Columns added to the chunked products' vocabulary on `device` (0 on the CPU)."""
    return (-vocab_size) % VOCAB_ALIGN if device.type == "cuda" else 0


def _grad_buffers(
    x: Tensor, weight: Tensor, acc: torch.dtype, need_x: bool, need_w: bool, need_b: bool
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Gradient buffers: x's (N, d) in x's dtype, W's (V, d) and b's (V,) zeroed in `acc`."""
    return (
        torch.empty_like(x) if need_x else None,
        torch.zeros(weight.shape, dtype=acc, device=x.device) if need_w else None,
        torch.zeros(weight.shape[0], dtype=acc, device=x.device) if need_b else None,
    )


def _or_empty(t: Tensor | None, like: Tensor, dtype: torch.dtype) -> Tensor:
    """`t`, or an empty (0,) tensor standing for an absent gradient (custom ops return tensors)."""
    return t if t is not None else torch.empty(0, dtype=dtype, device=like.device)


def _ce_pass(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,
    ignore_index: int,
    scale: Tensor | None,
    chunk_size: int,
    compute_dtype: torch.dtype,
    needs: tuple[bool, bool, bool],
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor | None]:
    """One pass over the chunks: per-token losses and, with `scale`, the gradients.

    Args:
        x: (N, d); weight: (V, d); bias: (V,) or None; targets: (N,) int64.
        scale: None, or the upstream gradient per token, () or (N,), in the accumulate dtype a.
        needs: which of (x, W, b) get a gradient (with `scale`).

    Returns:
        (losses (N,) in a, valid (N,) bool, grad_x (N, d) in x's dtype, grad_W (V, d) in a,
        grad_b (V,) in a); the gradients None where not needed.
    """
    acc = _accumulate_dtype(compute_dtype)
    valid = targets != ignore_index
    safe_targets = torch.where(valid, targets, torch.zeros_like(targets))
    with_grad = scale is not None and any(needs)
    xc, wc = x.to(compute_dtype), weight.to(compute_dtype)
    b = None if bias is None else bias.to(acc)
    V = weight.shape[0]
    pad = vocab_padding(V, x.device)
    if pad:  # zero rows of W, bias −inf: the padded logits get probability 0 and gradient 0
        wc = torch.cat([wc, wc.new_zeros(pad, wc.shape[1])])
        b = torch.cat(
            [
                b if b is not None else torch.zeros(V, dtype=acc, device=x.device),
                torch.full((pad,), float("-inf"), dtype=acc, device=x.device),
            ]
        )
    grad_x, grad_w, grad_b = _grad_buffers(
        x, wc, acc, with_grad and needs[0], with_grad and needs[1], with_grad and needs[2]
    )
    losses = torch.empty(x.shape[0], dtype=acc, device=x.device)
    with torch.autocast(x.device.type, enabled=False):
        for start in range(0, x.shape[0], chunk_size):
            rows = slice(start, min(start + chunk_size, x.shape[0]))
            xs = xc[rows]
            row_scale = scale if scale is None or scale.dim() == 0 else scale[rows]
            losses[rows], grad = run_rows(
                ce_rows,
                xs @ wc.T,
                (safe_targets[rows], valid[rows], row_scale if with_grad else None),
                (b,),
            )
            if with_grad:
                _chunk_grads(grad, xs, wc, grad_x, grad_w, grad_b, rows)
            del grad
    if pad:
        grad_w = None if grad_w is None else grad_w[:V]
        grad_b = None if grad_b is None else grad_b[:V]
    return losses, valid, grad_x, grad_w, grad_b


# --------------------------------------------------------------------- mean and sum
@torch.library.custom_op(
    "tying::linear_cross_entropy_fused",
    mutates_args=(),
    schema=(
        "(Tensor x, Tensor weight, Tensor? bias, Tensor targets, int ignore_index, "
        "str reduction, int chunk_size, ScalarType compute_dtype, bool need_x, bool need_w, "
        "bool need_b) -> (Tensor, Tensor, Tensor, Tensor)"
    ),
)
def _ce_fused(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,
    ignore_index: int,
    reduction: str,
    chunk_size: int,
    compute_dtype: torch.dtype,
    need_x: bool,
    need_w: bool,
    need_b: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Mean or summed loss and its gradients for an upstream gradient of 1 (one pass).

    Returns:
        (loss () in float32 (float64), G_x (N, d) in x's dtype, G_W (V, d) and G_b (V,) in
        the accumulate dtype); an absent gradient is an empty (0,) tensor.
    """
    acc = _accumulate_dtype(compute_dtype)
    n_valid = (targets != ignore_index).sum().to(acc)
    scale = 1.0 / n_valid if reduction == "mean" else torch.ones((), dtype=acc, device=x.device)
    losses, _, gx, gw, gb = _ce_pass(
        x,
        weight,
        bias,
        targets,
        ignore_index,
        scale,
        chunk_size,
        compute_dtype,
        (need_x, need_w, need_b and bias is not None),
    )
    loss = losses.sum() / n_valid if reduction == "mean" else losses.sum()
    return (
        loss.to(_out_dtype(x)),
        _or_empty(gx, x, x.dtype),
        _or_empty(gw, x, acc),
        _or_empty(gb, x, acc),
    )


@_ce_fused.register_fake
def _ce_fused_fake(
    x,
    weight,
    bias,
    targets,
    ignore_index,
    reduction,
    chunk_size,
    compute_dtype,
    need_x,
    need_w,
    need_b,
):
    acc = _accumulate_dtype(compute_dtype)
    need_b = need_b and bias is not None
    return (
        x.new_empty((), dtype=_out_dtype(x)),
        x.new_empty(x.shape if need_x else (0,)),
        x.new_empty(weight.shape if need_w else (0,), dtype=acc),
        x.new_empty((weight.shape[0] if need_b else 0,), dtype=acc),
    )


def _ce_fused_setup(ctx, inputs, output) -> None:
    _, weight, bias = inputs[:3]
    _, gx, gw, gb = output
    ctx.save_for_backward(gx, gw, gb)
    ctx.needs = tuple(inputs[8:11])
    ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)


def _scaled(grad: Tensor, grad_out: Tensor, dtype: torch.dtype) -> Tensor:
    """grad_out · grad in `dtype`: the stored gradient for the actual upstream gradient."""
    return (grad * grad_out.to(grad.dtype)).to(dtype)


def _ce_fused_backward(ctx, grad_out: Tensor, *_: Tensor):
    gx, gw, gb = ctx.saved_tensors
    need_x, need_w, need_b = ctx.needs
    w_dtype, b_dtype = ctx.dtypes
    return (
        _scaled(gx, grad_out, gx.dtype) if need_x else None,
        _scaled(gw, grad_out, w_dtype) if need_w else None,
        _scaled(gb, grad_out, b_dtype) if need_b and b_dtype is not None else None,
        *[None] * 8,
    )


_ce_fused.register_autograd(_ce_fused_backward, setup_context=_ce_fused_setup)


# --------------------------------------------------------------------- reduction="none"
@torch.library.custom_op(
    "tying::linear_cross_entropy_rows",
    mutates_args=(),
    schema=(
        "(Tensor x, Tensor weight, Tensor? bias, Tensor targets, int ignore_index, "
        "int chunk_size, ScalarType compute_dtype) -> Tensor"
    ),
)
def _ce_rows_op(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,
    ignore_index: int,
    chunk_size: int,
    compute_dtype: torch.dtype,
) -> Tensor:
    """Per-token losses (N,) in float32 (float64), 0 on ignored tokens."""
    losses = _ce_pass(
        x, weight, bias, targets, ignore_index, None, chunk_size, compute_dtype, (0, 0, 0)
    )[0]
    return losses.to(_out_dtype(x))


@_ce_rows_op.register_fake
def _ce_rows_fake(x, weight, bias, targets, ignore_index, chunk_size, compute_dtype):
    return x.new_empty((x.shape[0],), dtype=_out_dtype(x))


@torch.library.custom_op(
    "tying::linear_cross_entropy_rows_backward",
    mutates_args=(),
    schema=(
        "(Tensor grad, Tensor x, Tensor weight, Tensor? bias, Tensor targets, int ignore_index, "
        "int chunk_size, ScalarType compute_dtype, bool need_x, bool need_w, bool need_b) "
        "-> (Tensor, Tensor, Tensor)"
    ),
)
def _ce_rows_backward(
    grad: Tensor,
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,
    ignore_index: int,
    chunk_size: int,
    compute_dtype: torch.dtype,
    need_x: bool,
    need_w: bool,
    need_b: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of Σ_n grad_n · loss_n, each chunk recomputed: (G_x, G_W, G_b) in the dtypes
    of x, W and b (empty (0,) where not needed)."""
    acc = _accumulate_dtype(compute_dtype)
    need_b = need_b and bias is not None
    _, _, gx, gw, gb = _ce_pass(
        x,
        weight,
        bias,
        targets,
        ignore_index,
        grad.to(acc),
        chunk_size,
        compute_dtype,
        (need_x, need_w, need_b),
    )
    return (
        _or_empty(gx, x, x.dtype),
        _or_empty(None if gw is None else gw.to(weight.dtype), x, weight.dtype),
        _or_empty(None if gb is None else gb.to(bias.dtype), x, x.dtype),  # type: ignore[union-attr]
    )


@_ce_rows_backward.register_fake
def _ce_rows_backward_fake(
    grad, x, weight, bias, targets, ignore_index, chunk_size, compute_dtype, need_x, need_w, need_b
):
    need_b = need_b and bias is not None
    return (
        x.new_empty(x.shape if need_x else (0,)),
        weight.new_empty(weight.shape if need_w else (0,)),
        bias.new_empty(bias.shape) if need_b else x.new_empty((0,)),
    )


def _ce_rows_setup(ctx, inputs, output) -> None:
    x, weight, bias, targets = inputs[:4]
    ctx.save_for_backward(x, weight, bias, targets)
    ctx.args = tuple(inputs[4:7])


def _ce_rows_grad(ctx, grad_out: Tensor):
    x, weight, bias, targets = ctx.saved_tensors
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    need_b = need_b and bias is not None
    gx, gw, gb = _ce_rows_backward(
        grad_out, x, weight, bias, targets, *ctx.args, need_x, need_w, need_b
    )
    return (
        gx if need_x else None,
        gw if need_w else None,
        gb if need_b else None,
        *[None] * 4,
    )


_ce_rows_op.register_autograd(_ce_rows_grad, setup_context=_ce_rows_setup)


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
    check_ids(t, vocab_size, "target id", f" (ignore_index={ignore_index})", t != ignore_index)
    compute_dtype = _compute_dtype(x2)
    chunk = chunk_size or default_chunk_size(vocab_size, compute_dtype)
    grad_on = torch.is_grad_enabled()
    if reduction == "none":
        out = _ce_rows_op(x2, weight, bias, t, ignore_index, chunk, compute_dtype)
        return out.reshape(targets.shape)
    needs = (
        grad_on and x2.requires_grad,
        grad_on and weight.requires_grad,
        grad_on and bias is not None and bias.requires_grad,
    )
    return _ce_fused(x2, weight, bias, t, ignore_index, reduction, chunk, compute_dtype, *needs)[0]
