"""Building blocks without token logic: norms, rotary embedding, SwiGLU.

Notation: B batch, T query length, S key length (past + T), d = d_model,
H query heads, K key/value heads, D head_dim, f = d_ff.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tying.decoder.config import ModelConfig


def make_norm(config: ModelConfig) -> nn.Module:
    """RMSNorm or LayerNorm over d, with a weight (init 1) and no bias."""
    if config.norm == "rms":
        return nn.RMSNorm(config.d_model, eps=config.norm_eps)
    return nn.LayerNorm(config.d_model, eps=config.norm_eps, bias=False)


class RotaryEmbedding(nn.Module):
    """Rotary position tables cos/sin, (max_seq_len, D), non-persistent buffers (float32).

    Frequencies θ_i = rope_theta^(-2i/D), i < D/2; angle(p, i) = p · θ_i, and each table
    holds [angle, angle] (the "rotate half" layout: pairs (x_i, x_{i+D/2})).
    """

    def __init__(self, head_dim: int, max_seq_len: int, theta: float) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.max_seq_len = max_seq_len
        self.theta = float(theta)
        cos, sin = self._tables()
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def _tables(self, device: torch.device | None = None) -> tuple[Tensor, Tensor]:
        half = torch.arange(0, self.head_dim, 2, dtype=torch.float64, device=device) / self.head_dim
        inv_freq = self.theta**-half
        pos = torch.arange(self.max_seq_len, dtype=torch.float64, device=device)
        angles = torch.outer(pos, inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().float(), angles.sin().float()

    @torch.no_grad()
    def reset_tables_(self) -> None:
        """Recompute the tables in place (after loading on the meta device, for instance)."""
        cos, sin = self._tables(device=self.cos.device)
        self.cos.copy_(cos)
        self.sin.copy_(sin)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, max_seq_len={self.max_seq_len}, theta={self.theta}"


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the last dimension split in halves."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x (B, heads, T, D) by the angles of its positions: x·cos + rotate_half(x)·sin.

    cos/sin: (T, D) or (B, 1, T, D), cast to x's dtype.
    """
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) ⊙ up(x)): (..., d) -> (..., d), 3·d·f weights, no biases."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        d, f = config.d_model, config.d_ff
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)
        self.down_proj.residual_out = True  # scaled init (see Decoder.init_module_)

    def forward(self, x: Tensor) -> Tensor:
        return self.from_projections(self.gate_proj(x), self.up_proj(x))

    def from_projections(self, gate: Tensor, up: Tensor) -> Tensor:
        """down(silu(gate) ⊙ up) from the two input projections, (..., f) each -> (..., d)."""
        return self.down_proj(F.silu(gate) * up)
