"""Untied interface: independent input embedding E and unembedding U."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tying.interface.base import GradientSplit, TeacherConversion, TokenInterface
from tying.interface.linalg import check_finite_matrix


class Untied(TokenInterface):
    """E (V×d) and U = W_out^T (V×d), two independent parameters.

    Args:
        E: input embedding, (V, d).
        W: unembedding in `nn.Linear.weight` layout, (V, d).
        bias: optional output bias, (V,).
        loss_chunk_size: tokens per chunk in `loss`.
    """

    tie = "untied"
    vocab_tensors = ("weight_in", "weight_out")

    def __init__(
        self, E: Tensor, W: Tensor, bias: Tensor | None = None, loss_chunk_size: int | None = None
    ) -> None:
        check_finite_matrix(E, "E")
        check_finite_matrix(W, "W")
        if E.shape != W.shape:
            raise ValueError(
                f"E and W must both be (V, d); got E {tuple(E.shape)} and W {tuple(W.shape)}"
            )
        super().__init__(E.shape[0], E.shape[1], bias, loss_chunk_size)
        self.weight_in = nn.Parameter(E.detach().clone(memory_format=torch.contiguous_format))
        self.weight_out = nn.Parameter(W.detach().clone(memory_format=torch.contiguous_format))

    @classmethod
    def scratch(
        cls,
        vocab_size: int,
        d_model: int,
        *,
        generator: torch.Generator | None = None,
        init_std: float = 0.02,
    ) -> Untied:
        """Both matrices drawn i.i.d. from N(0, init_std²)."""
        E = torch.randn(vocab_size, d_model, generator=generator) * init_std
        W = torch.randn(vocab_size, d_model, generator=generator) * init_std
        return cls(E, W)

    @classmethod
    def placeholder(
        cls, vocab_size: int, d_model: int, *, dtype: torch.dtype, bias: bool, **options: Any
    ) -> Untied:
        zeros = torch.zeros(vocab_size, d_model, dtype=dtype)
        b = torch.zeros(vocab_size, dtype=dtype) if bias else None
        return cls(zeros, zeros, bias=b, **options)

    @classmethod
    def from_teacher_matrices(
        cls,
        E0: Tensor,
        U0: Tensor,
        *,
        bias: Tensor | None,
        teacher_tied: bool,
        source: str | None = None,
        loss_chunk_size: int | None = None,
    ) -> TeacherConversion:
        """Untied(E0, U0): the teacher's logits unchanged (a tied teacher gets two copies)."""
        if source is not None:
            raise ValueError(
                "source applies to tie='tt' or 'pit'; 'untied' keeps both teacher matrices"
            )
        notes = []
        if teacher_tied:
            notes.append("tied teacher: E and W_out start as two equal copies and train apart")
        interface = cls(E0, U0, bias=bias, loss_chunk_size=loss_chunk_size)
        return TeacherConversion(interface, "both", E0, notes, {})

    @classmethod
    def count_parameters(cls, vocab_size: int, d_model: int) -> int:
        """2·V·d: E and U."""
        return 2 * vocab_size * d_model

    def gradient_splits(self) -> list[GradientSplit]:
        """E's (input) against U's (output) gradient: two tensors."""
        return [GradientSplit("", "weight_in", "weight_out", shared=False)]

    def rows_parameter(self) -> str | None:
        return "weight_in"

    def embed(self, input_ids: Tensor) -> Tensor:
        self._check_ids(input_ids)
        return F.embedding(input_ids, self._on_side("input", "weight_in", self.weight_in))

    def _head_input(self, hidden: Tensor) -> Tensor:
        return hidden

    def _head_weight(self) -> Tensor:
        return self._on_side("output", "weight_out", self.weight_out)

    def embedding_matrix(self) -> Tensor:
        return self.weight_in
