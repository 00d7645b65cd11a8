"""Grouped-query self-attention with rotary positions and a channel-wise output gate.

For x (B, T, d), H query heads and K key/value heads of width D (H·D = d):

    q = x W_q (H heads), k = x W_k, v = x W_v (K heads each, shared by H/K query heads)
    q, k <- RoPE(q), RoPE(k)
    a = softmax(q k^T / sqrt(D) + causal mask) v          (B, T, H·D)
    out = (a ⊙ g) W_o                                       g ∈ R^{H·D}, learnable, init 1

The gate g scales each channel of the concatenated head outputs before the
output projection. Attention runs in `F.scaled_dot_product_attention` with
`enable_gqa=True` (no repeated key/value copies).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tying.decoder.config import ModelConfig
from tying.decoder.layers import apply_rotary


class GroupedQueryAttention(nn.Module):
    """Causal GQA (see the module docstring); projections q_proj, k_proj, v_proj, o_proj, no biases."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads = int(config.n_heads)  # type: ignore[arg-type]
        self.n_kv_heads = int(config.n_kv_heads)  # type: ignore[arg-type]
        self.head_dim = config.head_dim
        d, inner, kv = config.d_model, self.n_heads * self.head_dim, config.kv_dim
        self.q_proj = nn.Linear(d, inner, bias=False)
        self.k_proj = nn.Linear(d, kv, bias=False)
        self.v_proj = nn.Linear(d, kv, bias=False)
        self.o_proj = nn.Linear(inner, d, bias=False)
        self.o_proj.residual_out = True  # scaled init (see Decoder.init_module_)
        self.gate = nn.Parameter(torch.ones(inner))

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        attn_mask: Tensor | None = None,
        cache: Any | None = None,
        layer_idx: int = 0,
    ) -> Tensor:
        """Attention branch output: (B, T, d) -> (B, T, d).

        Args:
            x: normed input, (B, T, d).
            cos, sin: rotary tables of the T query positions, (T, D) or (B, 1, T, D).
            attn_mask: None for plain causal attention over x itself (or a single new query
                after a cache); else a boolean mask (B or 1, 1, T, S), True = may attend.
            cache: optional key/value cache with `update(k, v, layer_idx) -> (k_all, v_all)`
                (a transformers `Cache`); the new keys/values are appended to it.
            layer_idx: index of this block in the cache.
        """
        return self.attend(
            self.q_proj(x), self.k_proj(x), self.v_proj(x), cos, sin, attn_mask, cache, layer_idx
        )

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cos: Tensor,
        sin: Tensor,
        attn_mask: Tensor | None = None,
        cache: Any | None = None,
        layer_idx: int = 0,
    ) -> Tensor:
        """The branch after its input projections: q (B, T, H·D), k and v (B, T, K·D) ->
        (B, T, d). Arguments otherwise as in `forward`."""
        B, T, _ = q.shape
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q = apply_rotary(q, cos, sin)
        k = apply_rotary(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, layer_idx)
        gqa = self.n_heads != self.n_kv_heads
        if attn_mask is not None:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=gqa)
        else:
            # Causal over x itself; with a cache and one new query, that query sees every key.
            causal = k.shape[2] == T
            a = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        a = a.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)
        return self.o_proj(a * self.gate.to(a.dtype))

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, head_dim={self.head_dim}"
