"""The parallel block: attention and MLP read the same normed input, both add to the residual.

    x_{i+1} = x_i + Attn(N(x_i)) + MLP(N(x_i))

with one norm N per block (RMSNorm or LayerNorm, no bias).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from tying.decoder.attention import GroupedQueryAttention
from tying.decoder.config import ModelConfig
from tying.decoder.layers import SwiGLU, make_norm


class ParallelBlock(nn.Module):
    """One parallel block: `norm`, `attn` (GroupedQueryAttention), `mlp` (SwiGLU)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = make_norm(config)
        self.attn = GroupedQueryAttention(config)
        self.mlp = SwiGLU(config)

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        attn_mask: Tensor | None = None,
        cache: Any | None = None,
        layer_idx: int = 0,
    ) -> Tensor:
        """(B, T, d) -> (B, T, d); see `GroupedQueryAttention.forward` for the other arguments."""
        h = self.norm(x)
        return x + self.attn(h, cos, sin, attn_mask, cache, layer_idx) + self.mlp(h)
