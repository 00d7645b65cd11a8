"""Batches: window layout, seeded order, resume, rank sharding == single process, eval order."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from tying.data.batches import WindowSampler, eval_batches, num_windows
from tying.data.shards import FORMAT_VERSION, Manifest, TokenStore, open_shards, shard_name

V = 60_000


def make_store(folder: Path, num_tokens: int, shard_tokens: int = 97) -> TokenStore:
    """A store whose token at stream position p is p % V, so a row shows where it came from."""
    folder.mkdir(parents=True, exist_ok=True)
    tokens = (np.arange(num_tokens) % V).astype("<u2")
    shards = []
    for i, start in enumerate(range(0, num_tokens, shard_tokens)):
        part = tokens[start : start + shard_tokens]
        part.tofile(folder / shard_name(i))
        shards.append(
            {"file": shard_name(i), "tokens": len(part), "documents": 0, "max_id": int(part.max())}
        )
    Manifest(
        format_version=FORMAT_VERSION,
        tokenizer={"name": "synthetic", "hash": "0" * 64, "vocab_size": V, "eos_id": 0},
        dtype="<u2",
        shards=shards,
        num_tokens=num_tokens,
        num_documents=0,
        source="synthetic",
        fingerprint="0" * 64,
    ).save(folder)
    return open_shards(folder, expected_vocab_size=V)


@pytest.fixture
def store(tmp_path) -> TokenStore:
    return make_store(tmp_path / "s", num_tokens=1000)  # L = 8: 124 windows


def window_ids(inputs: torch.Tensor, seq_len: int) -> list[int]:
    """The window index of each row (its first token / L)."""
    starts = inputs[:, 0].tolist()
    assert all(s % seq_len == 0 for s in starts)
    return [s // seq_len for s in starts]


def test_rows_are_contiguous_windows_with_shifted_targets(store):
    L = 8
    sampler = WindowSampler(store, seq_len=L, batch_size=5, seed=3)
    for _ in range(10):
        x, y = sampler.next_batch()
        assert x.shape == y.shape == (5, L) and x.dtype == y.dtype == torch.int64
        expected = x[:, :1] + torch.arange(L)  # token p is p: rows are consecutive stretches
        assert torch.equal(x, expected) and torch.equal(y, x + 1)
        assert (y[:, -1] < store.num_tokens).all()


def test_epoch_is_the_seeded_permutation_of_all_windows(store):
    L, B, seed = 8, 4, 11
    n = num_windows(store.num_tokens, L)
    assert n == (1000 - 1) // 8
    sampler = WindowSampler(store, L, B, seed=seed)
    seen = []
    while len(seen) < 2 * n:
        seen += window_ids(sampler.next_batch()[0], L)
    for epoch in range(2):
        reference = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
        assert seen[epoch * n : (epoch + 1) * n] == reference.tolist()
    assert sorted(seen[:n]) == list(range(n))  # each window once per epoch
    assert sampler.epoch == len(seen) // n


def test_same_seed_same_batches_other_seed_other_batches(store):
    a, b, c = (WindowSampler(store, 8, 6, seed=s) for s in (1, 1, 2))
    for _ in range(5):
        xa, xb, xc = a.next_batch()[0], b.next_batch()[0], c.next_batch()[0]
        assert torch.equal(xa, xb)
    assert not torch.equal(xa, xc)


@pytest.mark.parametrize("k", [0, 7, 30, 31])  # 31 * 4 = 124 = one epoch: crosses the boundary
def test_resume_gives_the_same_next_batches(store, k):
    ref = WindowSampler(store, 8, 4, seed=5)
    run = WindowSampler(store, 8, 4, seed=5)
    for _ in range(k):
        ref.next_batch()
        run.next_batch()
    state = json.loads(json.dumps(run.state_dict()))  # JSON-able
    assert all(isinstance(v, int) for v in state.values())
    resumed = WindowSampler(store, 8, 4, seed=5)
    resumed.load_state_dict(state)
    for _ in range(8):
        x_ref, y_ref = ref.next_batch()
        x, y = resumed.next_batch()
        assert torch.equal(x, x_ref) and torch.equal(y, y_ref)


def test_state_dict_checks_compatibility(store):
    state = WindowSampler(store, 8, 4, seed=5).state_dict()
    with pytest.raises(ValueError, match="seq_len"):
        WindowSampler(store, 16, 4, seed=5).load_state_dict(state)
    with pytest.raises(ValueError, match="seed"):
        WindowSampler(store, 8, 4, seed=6).load_state_dict(state)
    with pytest.raises(ValueError, match="bad sampler state"):
        WindowSampler(store, 8, 4, seed=5).load_state_dict({"epoch": 0, "position": 10**6})


@pytest.mark.parametrize(
    ("world_size", "micro", "accum"), [(2, 3, 1), (2, 1, 3), (3, 2, 2), (1, 2, 3)]
)
def test_ranks_together_see_the_single_process_global_batch(store, world_size, micro, accum):
    """Per optimizer step, the union over ranks and accumulation steps of the rows equals the
    global batch of one process with batch_size = world_size * micro * accum."""
    L, seed = 8, 7
    global_batch = world_size * micro * accum
    single = WindowSampler(store, L, global_batch, seed=seed)
    ranks = [
        WindowSampler(store, L, micro, seed=seed, rank=r, world_size=world_size)
        for r in range(world_size)
    ]
    for _step in range(2 * 124 // global_batch + 1):  # beyond one epoch
        expected = Counter(map(tuple, single.next_batch()[0].tolist()))
        got: Counter = Counter()
        for _ in range(accum):
            for sampler in ranks:
                rows = sampler.next_batch()[0].tolist()
                got.update(map(tuple, rows))
        assert got == expected
    # every rank holds the same state, equal to the single process's
    assert all(s.state_dict() == single.state_dict() for s in ranks)


def test_ranks_are_disjoint_and_strided(store):
    r0 = WindowSampler(store, 8, 3, seed=1, rank=0, world_size=2)
    r1 = WindowSampler(store, 8, 3, seed=1, rank=1, world_size=2)
    single = WindowSampler(store, 8, 6, seed=1)
    ids0, ids1 = window_ids(r0.next_batch()[0], 8), window_ids(r1.next_batch()[0], 8)
    ids = window_ids(single.next_batch()[0], 8)
    assert ids0 == ids[0::2] and ids1 == ids[1::2] and not set(ids0) & set(ids1)


def test_resume_on_another_world_size(store):
    """A state saved by 2 ranks (micro 2) restores a 1-process run (batch 4) at the same point."""
    two = [WindowSampler(store, 8, 2, seed=9, rank=r, world_size=2) for r in range(2)]
    for _ in range(5):
        for s in two:
            s.next_batch()
    one = WindowSampler(store, 8, 4, seed=9)
    one.load_state_dict(two[0].state_dict())
    expected = Counter()
    for s in two:
        expected.update(map(tuple, s.next_batch()[0].tolist()))
    assert Counter(map(tuple, one.next_batch()[0].tolist())) == expected


def test_bad_arguments(tmp_path, store):
    tiny = make_store(tmp_path / "tiny", num_tokens=8)
    with pytest.raises(ValueError, match="fewer than one window"):
        WindowSampler(tiny, seq_len=8, batch_size=1)
    assert WindowSampler(tiny, seq_len=7, batch_size=1).num_windows == 1
    with pytest.raises(ValueError, match="rank"):
        WindowSampler(store, 8, 1, rank=2, world_size=2)
    with pytest.raises(ValueError, match="batch_size"):
        WindowSampler(store, 8, 0)


def test_iterator_protocol(store):
    a, b = WindowSampler(store, 8, 2, seed=4), WindowSampler(store, 8, 2, seed=4)
    for (x, _), _i in zip(a, range(3), strict=False):
        assert torch.equal(x, b.next_batch()[0])


def test_eval_batches_are_sequential_and_cover_each_target_once(store):
    L = 8
    batches = list(eval_batches(store, L, batch_size=16))
    inputs = torch.cat([x for x, _ in batches])
    targets = torch.cat([y for _, y in batches])
    n = num_windows(store.num_tokens, L)
    assert len(batches) == -(-n // 16) and batches[-1][0].shape[0] == n - 16 * (len(batches) - 1)
    assert window_ids(inputs, L) == list(range(n))
    all_tokens = torch.from_numpy(store.slice(0, n * L + 1))
    assert torch.equal(targets.flatten(), all_tokens[1:])  # every target once, in order
    assert torch.equal(inputs.flatten(), all_tokens[:-1])
    again = [x for x, _ in eval_batches(store, L, batch_size=16)]
    assert all(torch.equal(a, x) for a, (x, _) in zip(again, batches, strict=True))


def test_eval_batches_max_tokens_and_ranks(store):
    L = 8
    capped = list(eval_batches(store, L, batch_size=4, max_tokens=100))
    assert sum(x.numel() for x, _ in capped) == (100 // L) * L
    single = torch.cat([x for x, _ in eval_batches(store, L, batch_size=5)])
    per_rank = [list(eval_batches(store, L, batch_size=5, rank=r, world_size=3)) for r in range(3)]
    assert len({len(b) for b in per_rank}) == 1  # same number of batches on every rank
    union = sorted(window_ids(torch.cat([x for x, _ in b]), L) for b in per_rank)
    flat = sorted(i for ids in union for i in ids)
    n = num_windows(store.num_tokens, L)
    assert flat == list(range(n - n % 3))
    assert set(window_ids(single, L)) >= set(flat)
    with pytest.raises(ValueError, match="less than one window"):
        next(eval_batches(store, L, 4, max_tokens=4))
