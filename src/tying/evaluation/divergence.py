"""Two next-token distributions compared token by token, a block of vocabulary columns at a time.

For one position with base logits z_p (p = softmax(z_p)), updated logits z_q (q = softmax(z_q))
and the observed next token y:

    KL(p ‖ q)  = Σ_v p_v (log p_v − log q_v) = Σ_v p_v (z_p,v − z_q,v) − lse(z_p) + lse(z_q)   (nats)
    ce_p       = lse(z_p) − z_p,y,   ce_q = lse(z_q) − z_q,y                                     (nats)
    agree      = [argmax_v z_p,v = argmax_v z_q,v]                                                (0 or 1)

with lse the log-sum-exp. `compare_chunks` reads the logits as column blocks
z[:, v0:v1] (`TokenInterface.logit_chunks`) and keeps, per position, running values updated
block by block (the online log-sum-exp):

    m ← max(m, max_v z_p,v),   s ← s·e^(m_old − m) + Σ_v e^(z_p,v − m),
    t ← t·e^(m_old − m) + Σ_v e^(z_p,v − m) (z_p,v − z_q,v)

so that at the end lse(z_p) = m + log s and Σ_v p_v (z_p,v − z_q,v) = t / s, and the same
running (m, s) for z_q. Nothing N×V is ever held: one block of each model's logits at a time.
Blocks run in float32 (float64 stays float64) whatever the autocast dtype; the running sums are
float64. Equal logits give KL exactly 0, ce_p = ce_q and agreement 1. Ties of the argmax go to
the lowest id (as `torch.argmax`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class TokenComparison:
    """Per-position results of `compare_chunks`, each a (N,) tensor.

    Attributes:
        kl_nats: KL(p ‖ q) in nats (float64).
        ce_base: cross-entropy of the next token under p, nats (float64); None without targets.
        ce_updated: the same under q; None without targets.
        agree: whether the top-1 tokens of p and q are the same (bool).
    """

    kl_nats: Tensor
    ce_base: Tensor | None
    ce_updated: Tensor | None
    agree: Tensor


class _Running:
    """Online log-sum-exp and argmax of one model's logits over column blocks."""

    def __init__(self, n: int, device: torch.device) -> None:
        self.m = torch.full((n,), -torch.inf, dtype=torch.float64, device=device)
        self.s = torch.zeros(n, dtype=torch.float64, device=device)
        self.best = torch.full((n,), -torch.inf, dtype=torch.float64, device=device)
        self.index = torch.zeros(n, dtype=torch.long, device=device)
        self.target = torch.zeros(n, dtype=torch.float64, device=device)

    def update(self, z: Tensor, v0: int, targets: Tensor | None) -> tuple[Tensor, Tensor]:
        """Fold block z (n, C) of columns v0.. in; returns (e^(z − m_new), e^(m_old − m_new))."""
        values, where = z.max(dim=-1)
        values = values.double()
        better = values > self.best  # strict: ties keep the lower id
        self.best = torch.where(better, values, self.best)
        self.index = torch.where(better, where + v0, self.index)
        m_new = torch.maximum(self.m, values)
        scale = torch.exp(self.m - m_new)  # exp(-inf) = 0 on the first block
        weights = torch.exp(z - m_new.to(z.dtype).unsqueeze(-1))
        self.s = self.s * scale + weights.sum(dim=-1, dtype=torch.float64)
        self.m = m_new
        if targets is not None:
            inside = (targets >= v0) & (targets < v0 + z.shape[-1])
            local = (targets - v0).clamp(0, z.shape[-1] - 1).unsqueeze(-1)
            picked = z.gather(-1, local).squeeze(-1).double()
            self.target = torch.where(inside, picked, self.target)
        return weights, scale

    @property
    def lse(self) -> Tensor:
        return self.m + torch.log(self.s)


def _work(z: Tensor) -> Tensor:
    return z.detach().to(torch.float64 if z.dtype == torch.float64 else torch.float32)


@torch.no_grad()
def compare_chunks(
    blocks: Iterable[tuple[int, Tensor, Tensor]], targets: Tensor | None = None
) -> TokenComparison:
    """Compare two models' next-token distributions from their logits in column blocks.

    Args:
        blocks: (v0, z_p[:, v0:v1], z_q[:, v0:v1]) covering the vocabulary 0..V−1 in order,
            each block (N, C) for the base (p) and the updated model (q).
        targets: (N,) observed next tokens in [0, V), or None (no cross-entropies).

    Returns:
        `TokenComparison` (see the module docstring for the definitions).

    Raises:
        ValueError: no blocks, blocks that do not start at 0 and follow one another, or of
            different shapes.
    """
    running_p = running_q = None
    t = None
    expected = 0
    for v0, zp, zq in blocks:
        if v0 != expected:
            raise ValueError(
                f"logit blocks must cover the vocabulary in order: got v0={v0}, expected {expected}"
            )
        if zp.shape != zq.shape or zp.dim() != 2:
            raise ValueError(
                f"blocks of the two models must both be (N, C), got {tuple(zp.shape)} and {tuple(zq.shape)}"
            )
        zp, zq = _work(zp), _work(zq)
        if running_p is None:
            running_p = _Running(zp.shape[0], zp.device)
            running_q = _Running(zp.shape[0], zp.device)
            t = torch.zeros(zp.shape[0], dtype=torch.float64, device=zp.device)
        weights, scale = running_p.update(zp, v0, targets)
        running_q.update(zq, v0, targets)
        t = t * scale + (weights * (zp - zq)).sum(dim=-1, dtype=torch.float64)
        expected = v0 + zp.shape[-1]
    if running_p is None or running_q is None or t is None:
        raise ValueError("no logit blocks to compare")
    lse_p, lse_q = running_p.lse, running_q.lse
    kl = t / running_p.s - lse_p + lse_q
    ce_p = ce_q = None
    if targets is not None:
        ce_p = lse_p - running_p.target
        ce_q = lse_q - running_q.target
    return TokenComparison(kl, ce_p, ce_q, running_p.index == running_q.index)
