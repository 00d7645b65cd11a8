"""torchrun with 2 CPU processes (gloo): same global batch, same losses as one process (the
GPUs of a machine that has them are hidden: these are the CPU runs); more processes than GPUs
are refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tying.train.metrics import read_metrics

from .conftest import small_run


def _train(args: list[str], nproc: int, tmp_cache: str) -> subprocess.CompletedProcess[str]:
    """`tying train ARGS` in one process, or under torchrun in `nproc`, on the CPU (the GPUs of
    a machine that has them hidden), one thread each."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TYING_CACHE_DIR=tmp_cache, CUDA_VISIBLE_DEVICES="")
    torchrun = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd = [sys.executable, *(torchrun if nproc > 1 else []), "-m", "tying", "train", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _run(args: list[str], nproc: int, tmp_cache: str) -> None:
    out = _train(args, nproc, tmp_cache)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_processes_match_one(small_corpus, tmp_path, mode) -> None:
    cache = str(tmp_path / "cache")
    common = {"max_steps": 4, "tie": "pit", "pit.trainable_z": True, "eval_every": 2}
    _run(small_run(small_corpus, tmp_path / "one", **common), 1, cache)
    _run(small_run(small_corpus, tmp_path / "two", distributed=mode, **common), 2, cache)
    one = [r for r in read_metrics(tmp_path / "one") if "loss" in r or "val_loss" in r]
    two = [r for r in read_metrics(tmp_path / "two") if "loss" in r or "val_loss" in r]
    assert [r["step"] for r in one] == [r["step"] for r in two]
    for a, b in zip(one, two):
        key = "loss" if "loss" in a else "val_loss"
        assert abs(a[key] - b[key]) <= 1e-4, (a, b)


def test_a_process_group_is_refused_a_folder_in_use(small_corpus, tmp_path) -> None:
    """Rank 0 takes the lock for the group; when the folder is held elsewhere, every rank stops
    with the same one-line error (none waits for rank 0 in a collective)."""
    from tying.train.lock import RunFolderLock

    out = tmp_path / "held"
    with RunFolderLock(out):
        result = _train(small_run(small_corpus, out, max_steps=2), 2, str(tmp_path / "cache"))
    assert result.returncode != 0
    refused = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if f"tying train: error: {out} is in use by process {os.getpid()} on " in line
    ]
    assert len(refused) == 2, result.stdout[-3000:] + result.stderr[-3000:]
    assert not out.exists()


def test_more_processes_than_gpus_is_one_line(monkeypatch) -> None:
    """The second process of `torchrun --nproc-per-node=2` on a one-GPU machine: a ConfigError
    that names the GPU count and the two ways out, not CUDA's 'invalid device ordinal'."""
    import torch

    from tying.config import ConfigError
    from tying.train.distributed import init_distributed

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(
        ConfigError, match=r"process 2 on a machine with 1 GPU\(s\): start at most 1 per node"
    ):
        init_distributed()
