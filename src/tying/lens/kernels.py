"""Row kernels of the streamed lens pass: statistics of a block of logits in one read.

A lens entry gives an (n, V) block of logits z in the compute dtype (bf16 or float32). The pass
needs, per row, in the work dtype (float32; float64 for float64 models):

    finished logits   x = c·tanh((z + b)/c)            (bias b, soft-capping c, where present)
    group maxima      g_j = max_{v ∈ group j} x_v      (groups of `GROUP` columns; (n, G))
    maximum           m = max_j g_j
    sum of exps       s = Σ_v exp(max(x_v − m, `EXP_FLOOR`))
    p-weighted dot    Σ_v p_v (x_v − m)                 (only when the head is not linear)

and, for training, the gradient of KL(p ‖ softmax(x)) with respect to z:

    ∂KL/∂z_v = (exp(x_v − m)/s − p_v) · (1 − tanh²((z_v + b_v)/c))

written in the compute dtype. Written with eager PyTorch ops (in place, block by block), each
elementwise step is a full pass over the block and a thread barrier; compiled with
`torch.compile` (Inductor: a vectorised C++ loop on CPU, Triton on CUDA), the steps fuse into
one or two reads of z: `row_stats` of a 1,024 × 49,152 bf16 block takes 20 ms compiled against
61 ms eager on the idle 2-core CPU, and the whole logit lens of SmolLM2 runs 1.04× faster idle
and 1.97× faster on a busy machine (docs/lens.md). The same functions run both ways: compiled
where the block is large (`COMPILE_MIN_ELEMENTS`) and a compiler is available, eager otherwise
(and as the fallback when compilation fails). `TYING_COMPILE=0` turns compilation off. The
dispatch (`COMPILE_MIN_ELEMENTS`, `compiler_available`, the fallback) is `tying.kernels`, shared
with the chunked losses of `tying.interface`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from tying.kernels import COMPILE_ENV, COMPILE_MIN_ELEMENTS, CompiledKernels, compiler_available

#: Columns per group when searching the largest logits.
GROUP = 128
#: x − m is clamped at this value before exp (e^−80 ≈ 1.8e−35 is still a normal float32;
#: subnormal floats are ~17× slower there; the sum changes by < V·e⁻⁸⁰).
EXP_FLOOR = -80.0
__all__ = [
    "COMPILE_ENV",
    "COMPILE_MIN_ELEMENTS",
    "EXP_FLOOR",
    "GROUP",
    "RowKernels",
    "compiler_available",
    "finish_",
    "group_max",
    "kernels",
    "row_grad",
    "row_stats",
]


def finish_(x: Tensor, bias: Tensor | None, softcap: float | None) -> Tensor:
    """Finished logits c·tanh((x + b)/c), in place on work-dtype logits `x`: (..., V) -> `x`.

    `bias` broadcasts against `x` ((V,), or gathered to the shape of `x`).
    """
    if bias is not None:
        x.add_(bias)
    if softcap is not None:
        x.div_(softcap).tanh_().mul_(softcap)
    return x


def group_max(x: Tensor) -> Tensor:
    """Maxima of consecutive groups of `GROUP` columns: (r, V) -> (r, ⌈V / GROUP⌉)."""
    full = x.shape[1] // GROUP * GROUP
    parts = [x[:, :full].unflatten(1, (-1, GROUP)).amax(dim=2)] if full else []
    if full < x.shape[1]:
        parts.append(x[:, full:].amax(dim=1, keepdim=True))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def row_stats(
    z: Tensor,
    work: torch.dtype,
    bias: Tensor | None,
    softcap: float | None,
    probs: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Statistics of a block of logits (see the module docstring).

    Args:
        z: (r, V) logits in the compute dtype.
        work: the work dtype (float32 or float64).
        bias: (V,) output bias in the work dtype, or None.
        softcap: soft-capping c, or None.
        probs: (r, V) target probabilities p for the p-weighted dot, or None to skip it.

    Returns:
        group maxima (r, G), maximum m (r,), sum of exps s (r,), and Σ p (x − m) (r,) or None;
        all in the work dtype.
    """
    x = finish_(z.to(work, copy=True), bias, softcap)
    groups = group_max(x)
    m = groups.amax(dim=1, keepdim=True)
    x.sub_(m)
    dot = None if probs is None else (x * probs).sum(dim=1)
    s = x.clamp_(min=EXP_FLOOR).exp_().sum(dim=1)
    return groups, m.squeeze(1), s, dot


def row_grad(
    z: Tensor,
    work: torch.dtype,
    bias: Tensor | None,
    softcap: float | None,
    m: Tensor,
    s: Tensor,
    probs: Tensor,
) -> Tensor:
    """∂KL(p ‖ softmax(x))/∂z of a block: (r, V) logits, (r,) m and s of `row_stats`, (r, V) p ->
    (r, V) in the dtype of z."""
    x = finish_(z.to(work, copy=True), bias, softcap)
    # tanh((z + b)/c) = x/c, for the soft-capping factor
    cap = None if softcap is None else 1.0 - (x / softcap).square_()
    q = x.sub_(m.unsqueeze(1)).clamp_(min=EXP_FLOOR).exp_().div_(s.unsqueeze(1))
    q.sub_(probs)
    if cap is not None:
        q.mul_(cap)
    return q.to(z.dtype)


class RowKernels(CompiledKernels):
    """`row_stats` and `row_grad`, compiled or eager (one instance per process: `kernels`)."""

    def __init__(self) -> None:
        super().__init__("lens")

    def stats(self, z: Tensor, *args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """`row_stats(z, *args)`, compiled when `enabled`."""
        return self.call(row_stats, z, *args)

    def grad(self, z: Tensor, *args: Any) -> Tensor:
        """`row_grad(z, *args)`, compiled when `enabled`."""
        return self.call(row_grad, z, *args)


#: The process's kernels.
kernels = RowKernels()
