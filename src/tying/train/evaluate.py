"""Held-out loss and perplexity of a causal LM on a token store."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn

from tying.data.batches import eval_batches
from tying.data.token_store import TokenStore


@torch.no_grad()
def evaluate(
    model: nn.Module,
    store: TokenStore,
    *,
    seq_len: int,
    batch_size: int,
    max_tokens: int | None = None,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    device: torch.device | str = "cpu",
) -> dict[str, float]:
    """Mean next-token loss over sequential windows of `store`.

    Args:
        model: called as `model(inputs, targets)` -> mean loss in nats.
        store: the evaluation tokens.
        seq_len: tokens per window.
        batch_size: windows per forward pass.
        max_tokens: stop after about this many target tokens (None: the whole store).
        autocast: factory of the precision context.
        device: where batches go.

    Returns:
        {"loss": nats/token, "ppl": exp(loss), "tokens": target tokens evaluated}.
    """
    was_training = model.training
    model.eval()
    # summed on the device in float64, read once at the end: no host sync per batch
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0
    try:
        for inputs, targets in eval_batches(store, seq_len, batch_size, max_tokens=max_tokens):
            with autocast():
                loss = model(inputs.to(device), targets.to(device))
            n = targets.numel()
            total += loss.detach().double() * n
            count += n
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError(f"no evaluation windows of seq_len={seq_len} in {store.folder}")
    mean = float(total) / count
    return {"loss": mean, "ppl": math.exp(min(mean, 700.0)), "tokens": count}
