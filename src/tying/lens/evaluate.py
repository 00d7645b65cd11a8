"""Per-entry KL(final ‖ lens) of any lens over a stream of token batches.

Entries: index 0 is the embedding output x_0 (the input of the first block), index i the
output x_i of block i, index L the last residual state. A lens maps entry i to logits:

    logits_i = head(final_norm(lens.translate(x_i, i)))

with `head` the model's own head (interface, then soft-capping if the architecture has
one). The logit lens translates nothing; the tuned lens applies an affine translator. Since
the model's own distribution is head(final_norm(x_L)), entry L has KL 0 for both.

Unit: bits per token, averaged over every evaluated position (each window's L input
positions), KL(p ‖ q) = Σ_v p_v (log₂ p_v − log₂ q_v).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor
from tqdm.auto import tqdm

from tying.lens.kl import FinalDistribution
from tying.loader import LoadedModel

#: Unit of `LensKL.kl`.
UNIT = "bits/token"


class Lens(Protocol):
    """What `evaluate_lens` needs of a lens."""

    kind: str

    def translate(self, state: Tensor, index: int) -> Tensor:
        """The residual state of entry `index` as the lens reads it: (..., d) -> (..., d)."""
        ...


def entry_labels(n_entries: int) -> list[str]:
    """["emb", "1", ..., "L"]: the label of each entry (0 = embedding output, i = block i)."""
    return ["emb", *[str(i) for i in range(1, n_entries)]]


@dataclass
class LensKL:
    """Per-entry KL of one lens on one model.

    Attributes:
        kl: one float per entry 0..L, KL(final ‖ lens) in bits/token averaged over `tokens`.
        tokens: number of evaluated positions.
        bytes: UTF-8 bytes of the evaluated text, when known (for bits/byte).
    """

    kl: list[float]
    tokens: int
    bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def bits_per_byte(self) -> list[float] | None:
        """KL in bits/byte = bits/token × tokens / bytes (None without a byte count)."""
        if not self.bytes:
            return None
        ratio = self.tokens / self.bytes
        return [v * ratio for v in self.kl]

    def to_dict(self, name: str, kind: str) -> dict[str, Any]:
        """The `lens.json` record: name, kind, unit ("bits/token"), tokens, kl (+ bytes and
        kl_bits_per_byte when the byte count is known, + any extra fields)."""
        record: dict[str, Any] = {
            "name": name,
            "kind": kind,
            "unit": UNIT,
            "tokens": self.tokens,
            "kl": list(self.kl),
        }
        per_byte = self.bits_per_byte()
        if per_byte is not None:
            record["bytes"] = self.bytes
            record["kl_bits_per_byte"] = per_byte
        record.update(self.extra)
        return record


@torch.no_grad()
def evaluate_lens(
    model: LoadedModel,
    lens: Lens,
    batches: Iterable[Tensor],
    *,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    device: torch.device | str | None = None,
    chunk_tokens: int = 1024,
    progress: bool = False,
    total: int | None = None,
) -> LensKL:
    """Mean KL(final ‖ lens) per entry, in bits/token (see the module docstring).

    Args:
        model: the model (eval mode).
        lens: a `LogitLens`, a `TunedLens`, or anything with `translate(state, index)`.
        batches: int64 token ids (B, T) per batch; every position is scored.
        autocast: factory of the precision context of the forward pass and of the heads
            (the KL always runs in float32).
        device: where batches go (default: the model's device).
        chunk_tokens: positions per head evaluation: memory is O(chunk_tokens × V).
        progress: show a progress bar.
        total: number of batches, for the progress bar.

    Returns:
        `LensKL` with L + 1 values.

    Raises:
        ValueError: no batches, or bad sizes.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    device = model.device if device is None else torch.device(device)
    n_entries = model.n_entries
    sums = torch.zeros(n_entries, dtype=torch.float64, device=device)
    count = 0
    for ids in tqdm(batches, total=total, disable=not progress, desc=f"{lens.kind} lens"):
        ids = ids.to(device)
        with autocast():
            states, final = model.states_and_final(ids)
        n = ids.numel()
        flat = [s.reshape(n, s.shape[-1]) for s in states]
        final = final.reshape(n, final.shape[-1])
        for start in range(0, n, chunk_tokens):
            stop = min(start + chunk_tokens, n)
            with autocast():
                target = FinalDistribution.from_logits(model.logits_from_hidden(final[start:stop]))
            for i, state in enumerate(flat):
                with autocast():
                    logits = model.lens_logits(lens.translate(state[start:stop], i))
                sums[i] += target.kl_bits(logits).sum().double()
        count += n
    if count == 0:
        raise ValueError("no evaluation batches: the data produced no windows")
    return LensKL(kl=(sums / count).cpu().tolist(), tokens=count)
