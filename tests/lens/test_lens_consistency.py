"""Layerwise consistency: agreement with a per-position reference (the transition trace),
identities at the last entry, invariance to how positions are batched."""

from __future__ import annotations

import pytest
import torch

from tying.lens import transition_trace
from tying.lens.consistency import layerwise_consistency

from .conftest import LAYERS, VOCAB, loaded, tiny_decoder


def _ids(batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("tie", ["tt", "pit"])
def test_agreements_are_the_traces_averaged(tie) -> None:
    """Against a per-position reference: `transition_trace` on every prefix. V = 97 > d = 64:
    with V = d a random PIT's Z is square orthogonal and its entry-0 logits exactly one-hot,
    whose tied top-k sets no two computations need order alike."""
    lm = loaded(tiny_decoder(tie, vocab_size=97), name=tie)
    ids = _ids(2, 5, seed=5)
    k = 4
    got = layerwise_consistency(lm, [ids], k=k)
    assert got.positions == 10 and got.k == k
    assert len(got.final_agreement) == len(got.anchor_agreement) == LAYERS + 1
    overlaps = torch.zeros(LAYERS + 1, dtype=torch.float64)
    finals = torch.zeros(LAYERS + 1, dtype=torch.float64)
    for row in ids:
        for t in range(row.shape[0]):
            trace = transition_trace(lm, row[: t + 1], k=k)
            overlaps += torch.tensor([e.overlap for e in trace.entries], dtype=torch.float64)
            last = set(trace.entries[-1].output_ids)
            finals += torch.tensor(
                [len(set(e.output_ids) & last) / k for e in trace.entries], dtype=torch.float64
            )
    torch.testing.assert_close(
        torch.tensor(got.anchor_agreement, dtype=torch.float64), overlaps / 10
    )
    torch.testing.assert_close(torch.tensor(got.final_agreement, dtype=torch.float64), finals / 10)
    assert got.final_agreement[-1] == 1.0
    assert got.consistency == pytest.approx(sum(got.final_agreement[:-1]) / LAYERS)
    assert all(0.0 <= x <= 1.0 for x in got.final_agreement + got.anchor_agreement)


def test_batching_does_not_change_the_averages() -> None:
    lm = loaded(tiny_decoder("tt"), name="tt")
    ids = _ids(4, 8, seed=6)
    whole = layerwise_consistency(lm, [ids], k=3)
    split = layerwise_consistency(lm, [ids[:1], ids[1:3], ids[3:]], k=3)
    assert split.positions == whole.positions == 32
    assert split.final_agreement == pytest.approx(whole.final_agreement, abs=1e-12)
    assert split.anchor_agreement == pytest.approx(whole.anchor_agreement, abs=1e-12)


def test_bad_arguments() -> None:
    lm = loaded(tiny_decoder("tt"), name="tt")
    with pytest.raises(ValueError, match="k must be"):
        layerwise_consistency(lm, [torch.zeros(1, 4, dtype=torch.long)], k=0)
    with pytest.raises(ValueError, match="no positions"):
        layerwise_consistency(lm, [], k=2)
