"""benchmarks/steps.py: the training step the benchmarks time is `tying.train.loop.train_step` on a
run built as `tying train` builds one (the run's optimizers and PIT's retraction, the tracker),
and the benchmarks that time a training step write none of their own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from benchmarks import steps
from tying.train.build import build_model

ROOT = Path(__file__).resolve().parents[1]
#: The benchmarks that time a training step (issue 39 item 3).
STEP_BENCHMARKS = ("gpu.py", "gradient_paths.py", "pit_step_time.py", "train_throughput.py")
V, B, T = 384, 2, 16


def _config(*overrides: str):
    return steps.train_config(
        ["preset=tiny", f"seq_len={T}", "precision=fp32", "compile=false", *overrides]
    )


def _batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [
        (torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g))
        for _ in range(n)
    ]


def test_the_first_step_reports_the_loss_and_gradient_norm_of_the_fresh_model() -> None:
    cfg = _config("tie=tt")
    batches = _batches(2)
    reference = build_model(cfg, V)  # the same weights: build_model draws from cfg.seed
    loss = reference(*batches[0])
    loss.backward()
    norm = torch.linalg.vector_norm(
        torch.stack([p.grad.norm() for p in reference.parameters() if p.grad is not None])
    )
    step = steps.project_step(build_model(cfg, V), cfg, batches, accum=1)
    first = step()
    assert first.loss == pytest.approx(float(loss.detach()), rel=1e-6)
    assert first.grad_norm == pytest.approx(float(norm), rel=1e-5)
    assert first.tokens == B * T
    assert first.extra == {}


def test_micro_batches_are_served_in_turn_and_resume_where_they_were() -> None:
    batches = _batches(3)
    source = steps.CyclingBatches(batches)
    served = [source.next_batch() for _ in range(4)]
    assert [b is batches[i] for b, i in zip(served, (0, 1, 2, 0), strict=True)] == [True] * 4
    again = steps.CyclingBatches(batches)
    again.load_state_dict(source.state_dict())
    assert again.next_batch() is batches[1]


def test_pit_keeps_z_on_the_stiefel_manifold_through_the_run_s_retraction(monkeypatch) -> None:
    """Scratch PIT trains Z; `tying train` attaches the polar retraction, so Z's columns stay
    orthonormal after a step large enough to leave the manifold without it."""
    monkeypatch.setattr(steps, "LR", 1e-2)
    cfg = _config("tie=pit")
    model = build_model(cfg, V)
    assert model.interface.trainable_z
    steps.project_step(model, cfg, _batches(2))()
    Z = model.interface.z.detach().double()
    d = Z.shape[1]
    assert float((Z.T @ Z - torch.eye(d, dtype=torch.float64)).abs().max()) <= 1e-5

    # the control: the same step without the retraction leaves the manifold
    loose = build_model(cfg, V)
    for x, y in _batches(2):
        (loose(x, y) / 2).backward()
    torch.optim.AdamW(loose.parameters(), lr=1e-2).step()
    Z = loose.interface.z.detach().double()
    assert float((Z.T @ Z - torch.eye(d, dtype=torch.float64)).abs().max()) > 1e-3


def test_a_tracked_run_returns_the_tracker_s_row() -> None:
    cfg = _config("tie=tt", "track_gradient_paths=true")
    outcome = steps.project_step(build_model(cfg, V), cfg, _batches(2))()
    assert outcome.extra  # the gradient-path tracker's metrics of the step
    assert outcome.tokens == 2 * B * T


@pytest.mark.parametrize("name", STEP_BENCHMARKS)
def test_step_benchmarks_time_the_loop_s_step_not_a_copy(name: str) -> None:
    tree = ast.parse((ROOT / "benchmarks" / name).read_text())
    calls = {
        node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
    }
    assert not calls & {"backward", "clip_grad_norm_", "attach_retraction", "zero_grad"}, name
    assert "project_step" in calls, name
