"""Checkpoints: atomic layout, keep-last, latest pointer, safe loading, schedule."""

import itertools
import math

import pytest
import torch

from tying.train import checkpoint as ckpt
from tying.train.schedule import learning_rate


def _save(run_dir, step, keep_last=2):
    model = {"w": torch.full((2, 3), float(step))}
    opt = {"state": {0: {"exp_avg": torch.ones(2)}}, "param_groups": [{"lr": 0.1, "params": [0]}]}
    return ckpt.save_checkpoint(
        run_dir, step, model, opt, {"tokens": step * 10}, keep_last=keep_last
    )


def test_round_trip_and_keep_last(tmp_path) -> None:
    for step in (10, 20, 30):
        _save(tmp_path, step)
    names = [p.name for p in ckpt.list_checkpoints(tmp_path)]
    assert names == ["step-0000020", "step-0000030"]
    latest = ckpt.latest_checkpoint(tmp_path)
    model, opt, state = ckpt.load_checkpoint(latest)
    assert torch.equal(model["w"], torch.full((2, 3), 30.0))
    assert state == {"step": 30, "tokens": 300}
    assert torch.equal(opt["state"][0]["exp_avg"], torch.ones(2))


def test_partial_write_is_ignored(tmp_path) -> None:
    _save(tmp_path, 10)
    # A process killed mid-write leaves a .tmp folder and maybe a folder without trainer.json.
    (tmp_path / "checkpoints" / ".step-0000020.tmp").mkdir()
    (tmp_path / "checkpoints" / "step-0000030").mkdir()
    (tmp_path / "checkpoints" / "latest").write_text("step-0000030\n")
    assert ckpt.latest_checkpoint(tmp_path).name == "step-0000010"


def test_resolve_checkpoint_from_run_folder(tmp_path) -> None:
    path = _save(tmp_path, 5)
    assert ckpt.resolve_checkpoint(tmp_path) == path
    assert ckpt.resolve_checkpoint(path) == path
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        ckpt.resolve_checkpoint(tmp_path / "nothing")


def test_optimizer_file_refuses_arbitrary_objects(tmp_path) -> None:
    path = _save(tmp_path, 1)

    class Evil:
        def __reduce__(self):
            return (print, ("executed",))

    torch.save({"x": Evil()}, path / "optimizer.pt")
    with pytest.raises(Exception, match="(?i)weights_only|unsupported"):
        ckpt.load_checkpoint(path)


def test_learning_rate_schedule() -> None:
    kw = {"lr": 1.0, "warmup_steps": 10, "max_steps": 110, "min_lr_ratio": 0.1}
    assert learning_rate(5, **kw) == pytest.approx(0.5)
    assert learning_rate(10, **kw) == pytest.approx(1.0)
    assert learning_rate(60, **kw) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert learning_rate(110, **kw) == pytest.approx(0.1)
    values = [learning_rate(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in itertools.pairwise(values))
