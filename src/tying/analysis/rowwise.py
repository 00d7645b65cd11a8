"""Row-wise cosine similarity, the building block of the per-token scores."""

from __future__ import annotations

import torch
from torch import Tensor


def row_cosine(A: Tensor, B: Tensor) -> Tensor:
    """Cosine similarity of matching rows, in float64.

    cos_v = <A[v], B[v]> / (||A[v]|| ||B[v]||); a row whose norm is zero in
    either matrix gets cosine 0 (it has no direction), never NaN.

    Args:
        A: (V, d) floating point.
        B: (V, d) floating point, same shape as A.

    Returns:
        (V,) float64, each entry in [-1, 1] (unitless).
    """
    if A.shape != B.shape:
        raise ValueError(
            f"row_cosine needs matrices of the same shape, got {tuple(A.shape)} and {tuple(B.shape)}"
        )
    A64 = A.detach().to(torch.float64)
    B64 = B.detach().to(torch.float64)
    dots = (A64 * B64).sum(dim=1)
    norms = A64.norm(dim=1) * B64.norm(dim=1)
    cos = torch.where(norms > 0, dots / norms.clamp_min(torch.finfo(torch.float64).tiny), 0.0)
    return cos.clamp(-1.0, 1.0)
