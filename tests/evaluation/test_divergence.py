"""`compare_chunks` (KL, cross-entropies, top-1 agreement from column blocks) against a naive
float64 computation on the full logits, for any block size."""

from __future__ import annotations

import pytest
import torch

from tying.evaluation.divergence import compare_chunks


def blocks(zp: torch.Tensor, zq: torch.Tensor, size: int):
    for v0 in range(0, zp.shape[-1], size):
        yield v0, zp[:, v0 : v0 + size], zq[:, v0 : v0 + size]


@pytest.mark.parametrize("size", [1, 5, 37, 100, 1000])
def test_against_full_logits(size: int) -> None:
    g = torch.Generator().manual_seed(0)
    zp = 4 * torch.randn(50, 100, generator=g)
    zq = zp + torch.randn(50, 100, generator=g)
    zq[:10] = zp[:10]  # equal rows: KL 0, same loss, agreement
    targets = torch.randint(0, 100, (50,), generator=g)
    result = compare_chunks(blocks(zp, zq, size), targets)
    lp, lq = torch.log_softmax(zp.double(), -1), torch.log_softmax(zq.double(), -1)
    kl = (lp.exp() * (lp - lq)).sum(-1)
    torch.testing.assert_close(result.kl_nats, kl, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        result.ce_base, -lp.gather(1, targets[:, None])[:, 0], rtol=1e-6, atol=1e-5
    )
    torch.testing.assert_close(
        result.ce_updated, -lq.gather(1, targets[:, None])[:, 0], rtol=1e-6, atol=1e-5
    )
    assert torch.equal(result.agree, zp.argmax(-1) == zq.argmax(-1))
    assert bool((result.kl_nats[:10] == 0).all())
    assert torch.equal(result.ce_base[:10], result.ce_updated[:10])
    assert not bool(result.agree.all())


def test_ties_go_to_the_lowest_id_and_no_targets() -> None:
    zp = torch.tensor([[0.0, 2.0, 2.0, 1.0]])
    zq = torch.tensor([[2.0, 0.0, 0.0, 2.0]])
    # p's top-1: ids 1 and 2 tie -> 1; q's: ids 0 and 3 tie -> 0; block size 2 splits the ties
    result = compare_chunks(blocks(zp, zq, 2))
    assert result.agree.tolist() == [False] and result.ce_base is None
    same = compare_chunks(blocks(zq, torch.tensor([[1.0, 0.0, 0.0, 1.0]]), 2))
    assert same.agree.tolist() == [True]


def test_bad_blocks() -> None:
    z = torch.zeros(2, 4)
    with pytest.raises(ValueError, match="no logit blocks"):
        compare_chunks(iter([]))
    with pytest.raises(ValueError, match="in order"):
        compare_chunks(iter([(2, z, z)]))
    with pytest.raises(ValueError, match="both be"):
        compare_chunks(iter([(0, z, torch.zeros(2, 3))]))
