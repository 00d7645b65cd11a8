"""Transpose tying (TT): W_out = E^T, one V×d matrix on both sides."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tying.interface.base import SOURCES, GradientSplit, TeacherConversion, TokenInterface
from tying.interface.linalg import check_finite_matrix
from tying.interface.options import TransposeOptions


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

    tie = "tt"
    vocab_tensors = ("weight",)
    shares_matrix = True
    config_options = {"input_grad_scale": "input_grad_scale"}  # noqa: RUF012
    options_class = TransposeOptions

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
        *,
        generator: torch.Generator | None = None,
        init_std: float = 0.02,
        input_grad_scale: float = 1.0,
    ) -> TransposeTying:
        """E drawn i.i.d. from N(0, init_std²)."""
        E = torch.randn(vocab_size, d_model, generator=generator) * init_std
        return cls(E, input_grad_scale=input_grad_scale)

    @classmethod
    def placeholder(
        cls, vocab_size: int, d_model: int, *, dtype: torch.dtype, bias: bool, **options: Any
    ) -> TransposeTying:
        b = torch.zeros(vocab_size, dtype=dtype) if bias else None
        return cls(torch.zeros(vocab_size, d_model, dtype=dtype), bias=b, **options)

    @classmethod
    def from_teacher_matrices(
        cls,
        E0: Tensor,
        U0: Tensor,
        *,
        bias: Tensor | None,
        teacher_tied: bool,
        source: str | None = None,
        input_grad_scale: float = 1.0,
        loss_chunk_size: int | None = None,
    ) -> TeacherConversion:
        """TransposeTying(E0) (or U0 with source="output"): unchanged logits for a tied teacher."""
        if source is not None and source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES} or None, got {source!r}")
        source = source or "input"
        used = E0 if source == "input" else U0
        notes = []
        if not teacher_tied:
            notes.append(
                f"untied teacher: TT keeps its {source} matrix for both sides; the other "
                "one is dropped and logits change"
            )
        interface = cls(
            used, input_grad_scale=input_grad_scale, bias=bias, loss_chunk_size=loss_chunk_size
        )
        return TeacherConversion(interface, source, used, notes, {})

    @classmethod
    def count_parameters(cls, vocab_size: int, d_model: int) -> int:
        """V·d: one matrix, counted once."""
        return vocab_size * d_model

    def options(self) -> dict[str, Any]:
        return {**super().options(), "input_grad_scale": self.input_grad_scale}

    def gradient_splits(self) -> list[GradientSplit]:
        """E's input-side against its output-side gradient: one tensor."""
        return [GradientSplit("", "weight", "weight", shared=True)]

    def rows_parameter(self) -> str | None:
        return "weight"

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
