"""Untied interface: independent input embedding E and unembedding U."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tying.interface.base import TokenInterface
from tying.interface.linalg import check_finite_matrix


class Untied(TokenInterface):
    """E (V×d) and U = W_out^T (V×d), two independent parameters.

    Args:
        E: input embedding, (V, d).
        W: unembedding in `nn.Linear.weight` layout, (V, d).
        bias: optional output bias, (V,).
        loss_chunk_size: tokens per chunk in `loss`.
    """

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
        std: float = 0.02,
        generator: torch.Generator | None = None,
    ) -> Untied:
        """Both matrices drawn i.i.d. from N(0, std²)."""
        E = torch.randn(vocab_size, d_model, generator=generator) * std
        W = torch.randn(vocab_size, d_model, generator=generator) * std
        return cls(E, W)

    def embed(self, input_ids: Tensor) -> Tensor:
        self._check_ids(input_ids)
        return F.embedding(input_ids, self._on_side("input", "weight_in", self.weight_in))

    def _head_input(self, hidden: Tensor) -> Tensor:
        return hidden

    def _head_weight(self) -> Tensor:
        return self._on_side("output", "weight_out", self.weight_out)

    def embedding_matrix(self) -> Tensor:
        return self.weight_in
