"""Gradient paths: the input and output parts sum to the parameter gradient exactly."""

import pytest
import torch

from tying import PseudoInverseTying, TransposeTying, Untied
from tying.analysis.gradient_paths import GradientPathTracker


def _step(iface, ids, targets, micro: int = 1):
    for chunk_ids, chunk_t in zip(ids.chunk(micro), targets.chunk(micro)):
        h = torch.tanh(iface.embed(chunk_ids))
        (iface.loss(h, chunk_t) / micro).backward()


def _pit(trainable_z: bool):
    pit = PseudoInverseTying.scratch(40, 6, dtype=torch.float64, trainable_z=trainable_z)
    with torch.no_grad():
        pit.l_param.add_(torch.tril(torch.randn(6, 6, dtype=torch.float64) * 0.1))
    return pit


def test_tt_parts_sum_exactly_to_the_gradient_float64() -> None:
    tt = TransposeTying(torch.randn(40, 6, dtype=torch.float64))
    tracker = GradientPathTracker(tt)
    ids, targets = torch.randint(0, 40, (12,)), torch.randint(0, 40, (12,))
    tracker.start_step()
    _step(tt, ids, targets)
    g_in, g_out = tracker.part("weight", "input"), tracker.part("weight", "output")
    assert torch.equal(g_in + g_out, tt.weight.grad)
    # The input part is sparse: only rows of looked-up tokens.
    touched = (g_in != 0).any(dim=1)
    assert set(torch.nonzero(touched).flatten().tolist()) == set(ids.tolist())
    assert bool((g_out != 0).all())  # the output part is dense
    row = tracker.finish_step()
    assert row["rows_touched_in"] == len(set(ids.tolist()))
    assert row["grad_total_norm"] == pytest.approx(float(tt.weight.grad.norm()))
    assert row["grad_out_share"] == pytest.approx(
        row["grad_out_norm"] / (row["grad_in_norm"] + row["grad_out_norm"])
    )
    tracker.close()


def test_accumulates_over_all_micro_batches() -> None:
    tt = TransposeTying(torch.randn(40, 6, dtype=torch.float64))
    tracker = GradientPathTracker(tt)
    ids, targets = torch.randint(0, 40, (12,)), torch.randint(0, 40, (12,))
    tracker.start_step()
    _step(tt, ids, targets, micro=3)
    total = tracker.part("weight", "input") + tracker.part("weight", "output")
    torch.testing.assert_close(total, tt.weight.grad, rtol=1e-13, atol=1e-15)
    # The input part equals the gradient of the lookup alone, over all 3 micro-batches.
    ref = torch.zeros_like(tt.weight)
    for chunk_ids, chunk_t in zip(ids.chunk(3), targets.chunk(3)):
        e = tt.weight.detach()[chunk_ids].clone().requires_grad_(True)
        loss = tt.loss(torch.tanh(e), chunk_t) / 3
        (ge,) = torch.autograd.grad(loss, e)
        ref.index_add_(0, chunk_ids, ge)
    torch.testing.assert_close(tracker.part("weight", "input"), ref)


@pytest.mark.parametrize("trainable_z", [False, True])
def test_pit_parts_sum_exactly(trainable_z: bool) -> None:
    pit = _pit(trainable_z)
    tracker = GradientPathTracker(pit)
    tracker.start_step()
    _step(pit, torch.randint(0, 40, (10,)), torch.randint(0, 40, (10,)))
    assert torch.equal(
        tracker.part("l_param", "input") + tracker.part("l_param", "output"), pit.l_param.grad
    )
    row = tracker.finish_step()
    assert "grad_L_out_share" in row
    if trainable_z:
        assert torch.equal(tracker.part("z", "input") + tracker.part("z", "output"), pit.z.grad)
        assert "grad_Z_in_norm" in row and "rows_touched_in" in row
    else:
        assert tracker.part("z", "input") is None and "rows_touched_in" not in row


def test_untied_reports_each_matrix() -> None:
    un = Untied(torch.randn(40, 6, dtype=torch.float64), torch.randn(40, 6, dtype=torch.float64))
    tracker = GradientPathTracker(un)
    tracker.start_step()
    _step(un, torch.randint(0, 40, (10,)), torch.randint(0, 40, (10,)))
    row = tracker.finish_step()
    assert row["grad_in_norm"] == pytest.approx(float(un.weight_in.grad.norm()))
    assert row["grad_out_norm"] == pytest.approx(float(un.weight_out.grad.norm()))


def test_input_grad_scale_multiplies_only_the_input_part() -> None:
    E = torch.randn(40, 6, dtype=torch.float64)
    ids, targets = torch.randint(0, 40, (12,)), torch.randint(0, 40, (12,))
    parts = {}
    for scale in (1.0, 5.0):
        tt = TransposeTying(E, input_grad_scale=scale)
        tracker = GradientPathTracker(tt)
        tracker.start_step()
        _step(tt, ids, targets)
        parts[scale] = (tracker.part("weight", "input"), tracker.part("weight", "output"))
    torch.testing.assert_close(parts[5.0][0], 5.0 * parts[1.0][0])
    torch.testing.assert_close(parts[5.0][1], parts[1.0][1])


def test_closing_removes_the_views() -> None:
    tt = TransposeTying(torch.randn(40, 6))
    tracker = GradientPathTracker(tt)
    tracker.close()
    assert tt._head_weight() is tt.weight
