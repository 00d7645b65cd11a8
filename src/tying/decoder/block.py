"""The parallel block: attention and MLP read the same normed input, both add to the residual.

    x_{i+1} = x_i + Attn(N(x_i)) + MLP(N(x_i))

with one norm N per block (RMSNorm or LayerNorm, no bias).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
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
        if self._fuses_projections(h.device):
            return x + self._fused_branches(h, cos, sin, attn_mask, cache, layer_idx)
        return x + self.attn(h, cos, sin, attn_mask, cache, layer_idx) + self.mlp(h)

    def _input_projections(self) -> tuple[nn.Linear, ...]:
        a, m = self.attn, self.mlp
        return (a.q_proj, a.k_proj, a.v_proj, m.gate_proj, m.up_proj)

    def _fuses_projections(self, device: torch.device) -> bool:
        """Whether `forward` takes `_fused_branches`: on CUDA, eager, with fusable projections.

        Not under `torch.compile`: there Inductor fuses the backward of every branch (RoPE,
        SiLU, the layout changes) into the gradient of the one concatenated product, a single
        pointwise kernel that took 115 ms of a 431 ms step (27 %; `small`, 131,072 tokens,
        H200, benchmarks/results/gpu-h200-fused-projections.json `ours_tt_compiled.profile`),
        where transformers' Llama with separate projections spends about 25 ms on the same
        work. With separate projections under compile the step took 364.5 ms instead of
        427.7 ms (two runs on the H200, not side by side; docs/training.md).
        """
        return (
            device.type == "cuda"
            and not torch.compiler.is_compiling()
            and self._projections_fusable()
        )

    def _projections_fusable(self) -> bool:
        """Whether the five input projections are plain `nn.Linear`s without hooks (not
        wrapped by LoRA or another adapter, not watched), so one product can replace them."""
        return all(
            type(lin) is nn.Linear and not lin._forward_hooks and not lin._forward_pre_hooks
            for lin in self._input_projections()
        )

    def _fused_branches(
        self,
        h: Tensor,
        cos: Tensor,
        sin: Tensor,
        attn_mask: Tensor | None,
        cache: Any | None,
        layer_idx: int,
    ) -> Tensor:
        """Attn(h) + MLP(h) with the five input projections as ONE matrix product (CUDA).

        Both branches read the same normed h (B, T, d), so
        [q k v g u] = h [W_q; W_k; W_v; W_g; W_u]^T, an (d × (H·D + 2·K·D + 2·f)) product that
        fills the GPU better than five narrow ones (k and v are only K·D wide). The weights
        stay separate parameters (state dicts, adapters and optimizers see no change); the
        concatenation is d × 5,760 values for `small`. Same function as the unfused path, up to
        the order of floating-point sums inside the product.
        """
        projections = self._input_projections()
        weight = torch.cat([lin.weight for lin in projections])
        q, k, v, g, u = F.linear(h, weight).split([lin.out_features for lin in projections], -1)
        attended = self.attn.attend(q, k, v, cos, sin, attn_mask, cache, layer_idx)
        return attended + self.mlp.from_projections(g, u)
