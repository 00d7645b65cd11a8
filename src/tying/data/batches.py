"""Batches of fixed-length token windows: shuffled and resumable for training, sequential for eval.

Windows. With L = seq_len and a store of N tokens, window i is tokens ``[i L, i L + L + 1)``
for i = 0 .. n_w - 1, n_w = floor((N - 1) / L). Its inputs are the first L tokens and its targets
the last L (shifted by one). Consecutive windows share one token (the last target of window i is
the first input of window i + 1), so every token except token 0 is a target exactly once per
epoch and no input is repeated. Windows ignore document boundaries (EOS separates documents).

Training order (`WindowSampler`). The *global stream* is the concatenation over epochs
e = 0, 1, 2, ... of ``torch.randperm(n_w, generator=torch.Generator().manual_seed(seed + e))``.
A sampler counts ``consumed``, the number of stream entries all ranks together have used; each
`WindowSampler.next_batch` call on every rank (one *micro-step*) uses the next ``B * W`` entries
(B = batch_size per rank, W = world_size): rank r takes stream positions
``consumed + r + W j`` for j = 0 .. B - 1 (a strided share), then ``consumed += B W``.

So micro-step k of all ranks together uses exactly stream positions ``[k B W, (k + 1) B W)``, and
an optimizer step of A accumulated micro-steps uses ``[s A B W, (s + 1) A B W)``: the same windows
as one process with batch_size = A B W (or with B and A W accumulation steps). A 2-rank DDP run
therefore sees the same tokens per optimizer step as a 1-process run with the same global batch.
`state_dict` stores ``consumed`` (as epoch and position within the epoch), which is the same on
every rank, so the state saved by rank 0 restores all ranks, even with another W or B whose
product with the accumulation steps keeps the global batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tying.data.token_store import TokenStore
from tying.errors import InvalidInputError


def num_windows(num_tokens: int, seq_len: int) -> int:
    """n_w = floor((N - 1) / L): windows of L + 1 tokens at stride L in N tokens."""
    return max((num_tokens - 1) // seq_len, 0)


def _check_store(store: TokenStore, seq_len: int, batch_size: int) -> int:
    if seq_len < 1 or batch_size < 1:
        raise InvalidInputError(f"seq_len and batch_size must be >= 1, got {seq_len}, {batch_size}")
    n = num_windows(store.num_tokens, seq_len)
    if n < 1:
        raise InvalidInputError(
            f"the token store {store.folder} has {store.num_tokens} tokens, fewer than one window "
            f"of seq_len + 1 = {seq_len + 1}; use a shorter seq_len or a larger corpus"
        )
    return n


def _windows_to_batch(store: TokenStore, starts: np.ndarray, seq_len: int) -> tuple[Tensor, Tensor]:
    rows = np.stack([store.slice(int(s), seq_len + 1) for s in starts])
    tokens = torch.from_numpy(rows)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


class WindowSampler:
    """Shuffled, resumable, rank-sharded training batches (ordering: see the module docstring).

    Args:
        store: the token store.
        seq_len: L, tokens per input row.
        batch_size: B, rows per `next_batch` on this rank (the micro-batch size).
        seed: base seed; epoch e uses seed + e.
        rank: r, this process's rank, 0 <= r < world_size.
        world_size: W, number of data-parallel processes.

    Raises:
        ValueError: the store holds fewer than L + 1 tokens, or bad arguments.
    """

    def __init__(
        self,
        store: TokenStore,
        seq_len: int,
        batch_size: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise InvalidInputError(
                f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}"
            )
        self.num_windows = _check_store(store, seq_len, batch_size)
        self.store = store
        self.seq_len = int(seq_len)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.consumed = 0
        self._perms: dict[int, np.ndarray] = {}

    @property
    def epoch(self) -> int:
        """The epoch of the next global window (0-based; fractional progress is `position`)."""
        return self.consumed // self.num_windows

    @property
    def position(self) -> int:
        """Index, within the current epoch's permutation, of the next global window."""
        return self.consumed % self.num_windows

    @property
    def tokens_per_step(self) -> int:
        """Target tokens one `next_batch` call uses across all ranks: B W L."""
        return self.batch_size * self.world_size * self.seq_len

    def permutation(self, epoch: int) -> np.ndarray:
        """Window order of `epoch`: randperm(n_w) from a generator seeded with seed + epoch."""
        if epoch not in self._perms:
            generator = torch.Generator().manual_seed(self.seed + epoch)
            self._perms = {e: p for e, p in self._perms.items() if e >= epoch - 1}
            self._perms[epoch] = torch.randperm(self.num_windows, generator=generator).numpy()
        return self._perms[epoch]

    def window_index(self, stream_position: int) -> int:
        """The window at a global stream position (epoch = position // n_w)."""
        epoch, offset = divmod(int(stream_position), self.num_windows)
        return int(self.permutation(epoch)[offset])

    def next_batch(self) -> tuple[Tensor, Tensor]:
        """This rank's next micro-batch; advances the global stream by B W windows.

        Returns:
            inputs, targets: int64 tensors of shape (B, L); targets[b, t] = inputs[b, t + 1] for
            t < L - 1 (the next token).
        """
        positions = self.consumed + self.rank + self.world_size * np.arange(self.batch_size)
        starts = np.array([self.window_index(p) for p in positions], dtype=np.int64) * self.seq_len
        self.consumed += self.batch_size * self.world_size
        return _windows_to_batch(self.store, starts, self.seq_len)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        return self

    def __next__(self) -> tuple[Tensor, Tensor]:
        return self.next_batch()

    def state_dict(self) -> dict[str, int]:
        """JSON-able position: ``epoch``, ``position`` (the global stream position is
        epoch n_w + position), plus ``seed``, ``seq_len`` and ``num_windows`` to check on load."""
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "seq_len": self.seq_len,
            "num_windows": self.num_windows,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict`: the next batches equal those of the sampler that saved it.

        Raises:
            ValueError: the state is from another seed, seq_len or corpus (window count).
        """
        for key, mine in (
            ("seed", self.seed),
            ("seq_len", self.seq_len),
            ("num_windows", self.num_windows),
        ):
            if key in state and int(state[key]) != mine:
                raise InvalidInputError(
                    f"sampler state has {key}={state[key]}, this sampler has {key}={mine}; resume "
                    "with the same corpus, seq_len and seed as the run that saved it"
                )
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position < self.num_windows:
            raise InvalidInputError(
                f"bad sampler state epoch={epoch}, position={position} "
                f"(num_windows={self.num_windows})"
            )
        self.consumed = epoch * self.num_windows + position


def eval_batches(
    store: TokenStore,
    seq_len: int,
    batch_size: int,
    max_tokens: int | None = None,
    *,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[tuple[Tensor, Tensor]]:
    """Sequential evaluation batches: windows 0, 1, 2, ... in order, no shuffling.

    Uses the first M = min(n_w, floor(max_tokens / L)) windows, so each target token is scored
    once. With W > 1 ranks, M is rounded down to a multiple of W and rank r takes windows
    r, r + W, ...: every rank runs the same number of batches (needed by FSDP) and the ranks
    together cover the first M windows.

    Args:
        store: the token store.
        seq_len: L.
        batch_size: rows per batch (the last batch may be smaller).
        max_tokens: cap on target tokens (None: the whole store).
        rank: r.
        world_size: W.

    Yields:
        inputs, targets: int64 tensors of shape (b, L), b <= batch_size.

    Raises:
        ValueError: fewer than L + 1 tokens, `max_tokens` < L, or fewer windows than ranks.
    """
    n = _check_store(store, seq_len, batch_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidInputError(
            f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}"
        )
    if max_tokens is not None:
        if max_tokens < seq_len:
            raise InvalidInputError(f"max_tokens={max_tokens} is less than one window of {seq_len}")
        n = min(n, max_tokens // seq_len)
    n -= n % world_size
    if n == 0:
        raise InvalidInputError(
            f"{world_size} ranks need at least {world_size} eval windows of "
            f"{seq_len + 1} tokens; the store has {store.num_tokens} tokens"
        )
    windows = np.arange(rank, n, world_size, dtype=np.int64)
    for i in range(0, len(windows), batch_size):
        yield _windows_to_batch(store, windows[i : i + batch_size] * seq_len, seq_len)
