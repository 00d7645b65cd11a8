"""Layerwise semantic consistency (PIT paper, abstract and Figure 2) as numbers over many tokens.

The PIT paper's abstract reports "stronger layerwise semantic consistency", which §1 describes
as "more reliable intermediate decoding", and Figure 2 draws it as the transition trace of one
token. `transition_trace` shows one position; this module averages over every position of a
text, at every residual entry i = 0..L (0 = embedding output, i = output of block i):

- `final_agreement[i]`: |top-k of the logit lens at entry i ∩ top-k of the logit lens at entry
  L| / k (entry L's lens is our decoder's own output), the share of the final prediction's k
  most likely tokens that entry i already decodes (1 at entry L by construction). The row's number, `consistency`, is its mean over the
  intermediate entries 0..L−1: how reliably intermediate decoding reads what the model ends
  up predicting.
- `anchor_agreement[i]`: |top-k input-side anchors ∩ top-k output-side anchors| / k, the
  transition trace's `overlap` (cosine of the raw state with the rows of E against the logit
  lens), averaged over positions.

Both are fractions in [0, 1], higher = more consistent. Definitions: docs/metrics.md,
"Layerwise consistency".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from tying.loader import LoadedModel


@dataclass
class LayerwiseConsistency:
    """Layerwise consistency of one model on a text.

    Attributes:
        k: tokens per top-k set.
        positions: positions averaged over.
        final_agreement: L + 1 fractions, entry 0 first (the last is 1).
        anchor_agreement: L + 1 fractions.
    """

    k: int
    positions: int
    final_agreement: list[float]
    anchor_agreement: list[float]

    @property
    def consistency(self) -> float:
        """Mean of `final_agreement` over the intermediate entries 0..L−1."""
        inner = self.final_agreement[:-1]
        return sum(inner) / len(inner)

    def to_dict(self) -> dict[str, object]:
        return {
            "k": self.k,
            "positions": self.positions,
            "consistency": self.consistency,
            "final_agreement": self.final_agreement,
            "anchor_agreement": self.anchor_agreement,
        }


def _overlap(a: Tensor, b: Tensor) -> Tensor:
    """Per row, |a ∩ b| for two (N, k) id tensors of distinct ids per row."""
    return (a[:, :, None] == b[:, None, :]).any(dim=-1).sum(dim=-1)


@torch.no_grad()
def layerwise_consistency(
    model: LoadedModel,
    batches: Iterable[Tensor],
    *,
    k: int = 10,
    candidates: int | None = None,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
) -> LayerwiseConsistency:
    """The two agreements of the module docstring, averaged over every position of `batches`.

    Args:
        model: the model.
        batches: (B, T) token-id tensors.
        k: tokens per top-k set (1 <= k <= candidates).
        candidates: only ids < candidates are ranked (the tokenizer's size, to leave out padded
            rows); default all V rows.
        autocast: precision context of the forward pass (top-k sets from float32).

    Raises:
        ValueError: a bad k or candidates count, or no positions.
    """
    V = model.vocab_size
    n = V if candidates is None else int(candidates)
    if not 1 <= n <= V:
        raise ValueError(f"candidates must be in [1, V={V}], got {candidates}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}], got {k}")
    E = F.normalize(model.interface.embedding_matrix()[:n].float(), dim=-1)
    final_sum: Tensor | None = None
    anchor_sum: Tensor | None = None
    positions = 0
    for ids in batches:
        ids = ids.to(model.device)
        with autocast():
            states, _ = model.states_and_final(ids)
        per_entry_anchor = []
        tops = []
        for state in states:
            x = state.reshape(-1, state.shape[-1])
            with autocast():
                logits = model.lens_logits(x)
            tops.append(logits.float()[:, :n].topk(k, dim=-1).indices)
            cos = F.normalize(x.float(), dim=-1) @ E.T
            per_entry_anchor.append(_overlap(cos.topk(k, dim=-1).indices, tops[-1]))
        last = tops[-1]
        per_entry_final = [_overlap(t, last) for t in tops]
        f = torch.stack(per_entry_final).double().sum(dim=1) / k
        a = torch.stack(per_entry_anchor).double().sum(dim=1) / k
        final_sum = f if final_sum is None else final_sum + f
        anchor_sum = a if anchor_sum is None else anchor_sum + a
        positions += last.shape[0]
    if positions == 0 or final_sum is None or anchor_sum is None:
        raise ValueError("no positions to average over")
    return LayerwiseConsistency(
        k=k,
        positions=positions,
        final_agreement=(final_sum / positions).tolist(),
        anchor_agreement=(anchor_sum / positions).tolist(),
    )
