"""Token windows for lenses: evaluation windows first, training windows after them.

A store of N tokens holds n_w = floor((N − 1) / L) windows of L = seq_len tokens at stride L
(the windows of `tying.data.eval_batches`). A lens run evaluates the first
M = min(n_w, floor(max_tokens / L)) windows, in order, and a tuned lens trained on the same
store uses only windows M, M + 1, ..., n_w − 1, so its training tokens never overlap the
evaluation tokens. Only the inputs of a window are used (L positions, each scored once).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from tying.data.batches import num_windows
from tying.data.token_store import TokenStore
from tying.data.tokenizer import TextTokenizer
from tying.errors import InvalidInputError


def eval_window_count(store: TokenStore, seq_len: int, max_tokens: int | None) -> int:
    """M = min(n_w, floor(max_tokens / L)), the number of evaluation windows.

    Raises:
        ValueError: the store holds less than one window, or max_tokens < seq_len.
    """
    n = num_windows(store.num_tokens, seq_len)
    if n < 1:
        raise InvalidInputError(
            f"the token store {store.folder} has {store.num_tokens} tokens, fewer than one "
            f"window of seq_len + 1 = {seq_len + 1}: use a shorter seq_len or more text"
        )
    if max_tokens is None:
        return n
    if max_tokens < seq_len:
        raise InvalidInputError(
            f"max_tokens={max_tokens} is less than one window of seq_len={seq_len}: raise "
            "max_tokens or lower seq_len"
        )
    return min(n, max_tokens // seq_len)


def window_batches(
    store: TokenStore, windows: Sequence[int], seq_len: int, batch_size: int
) -> Iterator[Tensor]:
    """Batches of windows in the given order.

    Args:
        store: the tokens.
        windows: window indices w (tokens [w L, w L + L)).
        seq_len: L.
        batch_size: windows per batch (the last batch may be smaller).

    Yields:
        int64 tensors (b, L), b <= batch_size.
    """
    if batch_size < 1:
        raise InvalidInputError(f"batch_size must be >= 1, got {batch_size}")
    windows = list(windows)
    for i in range(0, len(windows), batch_size):
        rows = [store.slice(int(w) * seq_len, seq_len) for w in windows[i : i + batch_size]]
        yield torch.from_numpy(np.stack(rows))


def training_steps(
    store: TokenStore,
    windows: Sequence[int],
    seq_len: int,
    *,
    steps: int,
    windows_per_step: int,
    batch_size: int,
    seed: int = 0,
) -> Iterator[list[Tensor]]:
    """Shuffled training steps: each a list of micro-batches holding `windows_per_step` windows.

    Windows are drawn without replacement from a permutation of `windows` (seeded with
    seed + epoch); when the budget steps × windows_per_step exceeds len(windows) the
    permutation is redrawn and windows repeat (a warning says so).

    Yields:
        `steps` lists of int64 tensors (b, L) with b <= batch_size, together windows_per_step rows.

    Raises:
        ValueError: no training windows, or non-positive sizes.
    """
    pool = np.asarray(list(windows), dtype=np.int64)
    if len(pool) == 0:
        raise InvalidInputError(
            "no training windows left after the evaluation windows: lower max_tokens, or "
            "give train_data, another text"
        )
    if steps < 1 or windows_per_step < 1:
        raise InvalidInputError(
            f"steps and windows_per_step must be >= 1, got {steps}, {windows_per_step}"
        )
    needed = steps * windows_per_step
    if needed > len(pool):
        warnings.warn(
            f"the tuned-lens budget needs {needed} windows of {seq_len} tokens but only "
            f"{len(pool)} distinct training windows exist: windows repeat "
            f"({needed / len(pool):.1f} epochs)",
            stacklevel=2,
        )
    epoch, order, used = 0, np.empty(0, dtype=np.int64), 0
    for _ in range(steps):
        chosen: list[int] = []
        while len(chosen) < windows_per_step:
            if used == len(order):
                generator = torch.Generator().manual_seed(seed + epoch)
                order = pool[torch.randperm(len(pool), generator=generator).numpy()]
                epoch, used = epoch + 1, 0
            take = min(windows_per_step - len(chosen), len(order) - used)
            chosen.extend(int(w) for w in order[used : used + take])
            used += take
        yield list(window_batches(store, chosen, seq_len, batch_size))


def text_bytes(tokenizer: TextTokenizer, batch: Tensor) -> int:
    """UTF-8 bytes of the text of each row of `batch` (decoded row by row), summed.

    With the token count, the ratio tokens/bytes converts bits/token to bits/byte (the unit
    of the tuned-lens library). Multi-byte characters cut at a window edge count as the
    replacement character; the error is at most a few bytes per window.
    """
    return sum(len(tokenizer.decode(row).encode("utf-8")) for row in batch.tolist())
