"""Transpose tying (TT): W_out = E^T, one V×d matrix on both sides."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tying.interface.base import TokenInterface
from tying.interface.linalg import check_finite_matrix


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; multiplies the gradient by `scale` backward."""

    @staticmethod
    def forward(ctx, x: Tensor, scale: float) -> Tensor:  # type: ignore[override]
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        return grad * ctx.scale, None


def scale_grad(x: Tensor, scale: float) -> Tensor:
    """Return `x` unchanged, with its gradient multiplied by `scale` in the backward pass."""
    if scale == 1.0:
        return x
    return _ScaleGrad.apply(x, scale)


class TransposeTying(TokenInterface):
    """One matrix E (V×d): embed(ids) = E[ids], logits(h) = h E^T (+ b).

    The gradient of E is the sum of a sparse input-side part (rows of the
    tokens looked up) and a dense output-side part (every row, from the head).

    Args:
        E: the tied matrix, (V, d).
        input_grad_scale: multiplies only the gradient that reaches E through
            the input lookup; the forward pass and the output-side gradient are
            unchanged (the weight-tying-bias paper's §6 intervention, ×2/×5/×10).
        bias: optional output bias, (V,).
        loss_chunk_size: tokens per chunk in `loss`.
    """

    def __init__(
        self,
        E: Tensor,
        input_grad_scale: float = 1.0,
        bias: Tensor | None = None,
        loss_chunk_size: int | None = None,
    ) -> None:
        check_finite_matrix(E, "E")
        super().__init__(E.shape[0], E.shape[1], bias, loss_chunk_size)
        if not (input_grad_scale == input_grad_scale and abs(input_grad_scale) < float("inf")):
            raise ValueError(f"input_grad_scale must be finite, got {input_grad_scale}")
        self.input_grad_scale = float(input_grad_scale)
        self.weight = nn.Parameter(E.detach().clone(memory_format=torch.contiguous_format))

    @classmethod
    def scratch(
        cls,
        vocab_size: int,
        d_model: int,
        std: float = 0.02,
        generator: torch.Generator | None = None,
        input_grad_scale: float = 1.0,
    ) -> TransposeTying:
        """E drawn i.i.d. from N(0, std²)."""
        E = torch.randn(vocab_size, d_model, generator=generator) * std
        return cls(E, input_grad_scale=input_grad_scale)

    def embed(self, input_ids: Tensor) -> Tensor:
        self._check_ids(input_ids)
        # Scaling the gradient of the looked-up rows equals scaling the input-side
        # gradient of E (the lookup is linear), at N×d rather than V×d cost.
        weight = self._on_side("input", "weight", self.weight)
        return scale_grad(F.embedding(input_ids, weight), self.input_grad_scale)

    def _head_input(self, hidden: Tensor) -> Tensor:
        return hidden

    def _head_weight(self) -> Tensor:
        return self._on_side("output", "weight", self.weight)

    def embedding_matrix(self) -> Tensor:
        return self.weight

    def extra_repr(self) -> str:
        return super().extra_repr() + f", input_grad_scale={self.input_grad_scale}"
