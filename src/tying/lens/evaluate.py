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

from tying.lens.head import LensHead
from tying.lens.kl import LN2
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
    precision: str = "fp32",
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    device: torch.device | str | None = None,
    chunk_tokens: int = 1024,
    progress: bool = False,
    total: int | None = None,
    head: LensHead | None = None,
) -> LensKL:
    """Mean KL(final ‖ lens) per entry, in bits/token (see the module docstring).

    Per batch: one forward pass; per chunk of positions: the final distribution once
    (`LensHead.target`), then per entry one head product in `precision` streamed into float32
    log-sum-exp and KL (`LensHead.kl`). An entry whose normed state equals the model's final
    hidden state bitwise (entry L) has KL 0 without a product.

    Args:
        model: the model (eval mode).
        lens: a `LogitLens`, a `TunedLens`, or anything with `translate(state, index)`.
        batches: int64 token ids (B, T) per batch; every position is scored.
        precision: dtype of the head products: "fp32" (the reference: float32, float64 for a
            float64 model), "bf16" (within 1e-3 bits/token of fp32, see `tying.lens.head`) or
            "auto" (bf16 where the hardware multiplies it natively).
        autocast: factory of the precision context of the forward pass (default: none, the
            model's own dtype; a bf16 forward changes SmolLM2's KLs by ~0.01 bits/token).
        device: where batches go (default: the model's device).
        chunk_tokens: positions per head product: memory O(chunk_tokens × V).
        progress: show a progress bar.
        total: number of batches, for the progress bar.
        head: a prepared `LensHead` (default: `LensHead.of(model, precision)`).

    Returns:
        `LensKL` with L + 1 values.

    Raises:
        ValueError: no batches, or bad sizes.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    device = model.device if device is None else torch.device(device)
    head = head if head is not None else LensHead.of(model, precision)
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
            final_chunk = final[start:stop]
            target = head.target(final_chunk)
            for i, state in enumerate(flat):
                hidden = model.final_norm(lens.translate(state[start:stop], i))
                if hidden.dtype == final_chunk.dtype and torch.equal(hidden, final_chunk):
                    continue  # the model's own distribution: KL(p ‖ p) = 0
                sums[i] += head.kl(hidden, target).sum().double()
        count += n
    if count == 0:
        raise ValueError("no evaluation batches: the data produced no windows")
    return LensKL(kl=(sums / LN2 / count).cpu().tolist(), tokens=count)
