"""The run session (`tying.train.session`) of `tying train` and `tying finetune`: SIGINT and
SIGTERM checkpoint the current step and resume exactly, one used-folder policy, resume with
nothing to resume, a damaged newest checkpoint (any file) falls back, a full disk during a
checkpoint stops the run and keeps the previous one, TensorBoard shows a resumed run once."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tying.cli import main
from tying.config import load_config
from tying.train import checkpoint as ckpt
from tying.train import train
from tying.train.config import TrainConfig
from tying.train.metrics import read_metrics
from tying.train.session import RunInterrupted

from .conftest import small_run
from .test_train_run import _final_weights, _lora_args, _losses, _rows

#: Runs `tying VERB ARGS...` and sends itself the signal SIG while step K runs (just before the
#: step's first micro-batch): the handler's flag is set during step K, as a user's Ctrl-C or a
#: scheduler's SIGTERM would set it, but at a step the test chooses.
_DRIVER = """
import os, signal, sys
from tying.train import loop
K, SIG = int(sys.argv[1]), getattr(signal, sys.argv[2])
real_step = loop.train_step
def train_step(run, settings, step, *args, **kwargs):
    if step == K:
        os.kill(os.getpid(), SIG)
    return real_step(run, settings, step, *args, **kwargs)
loop.train_step = train_step
from tying.cli import main
sys.exit(main(sys.argv[3:]))
"""

#: The step the driver interrupts, and the run's length (checkpoints every 2 steps).
K, STEPS = 3, 6


def _qa_task(folder: Path) -> Path:
    task = folder / "qa.jsonl"
    task.write_text(
        "".join(
            json.dumps({"prompt": f"Q: {i} plus {i}?\nA:", "completion": f" {2 * i}"}) + "\n"
            for i in range(12)
        )
    )
    return task


@pytest.mark.parametrize(
    ("verb", "signame"),
    [
        ("train", "SIGINT"),
        ("finetune", "SIGTERM"),
        pytest.param("train", "SIGTERM", marks=pytest.mark.slow),
        pytest.param("finetune", "SIGINT", marks=pytest.mark.slow),
    ],
)
def test_a_signal_checkpoints_the_step_and_resume_continues_exactly(
    verb, signame, small_corpus, tiny_teacher, tmp_path, capsys
) -> None:
    """A signal at step K: step K finishes, its checkpoint is written (it is not a checkpoint
    step), one line says where, exit 130 / 143; resume=true then gives steps K+1, K+2, ... of
    the uninterrupted run bit for bit (losses, every metrics row, the final weights)."""
    if verb == "finetune":  # a LoRA update with dropout and a trained interface of a tiny Llama
        task = _qa_task(tmp_path)

        def args(out: Path, resume: bool = False) -> list[str]:
            return _lora_args(tiny_teacher, task, out, STEPS, resume)

        resume_option = "--resume"
    else:
        settings = dict(max_steps=STEPS, tie="pit", **{"pit.trainable_z": True})

        def args(out: Path, resume: bool = False) -> list[str]:
            return small_run(small_corpus, out, resume=resume, **settings)

        resume_option = "resume=true"
    ref_dir, out = tmp_path / "ref", tmp_path / "interrupted"
    assert main([verb, *args(ref_dir)]) == 0
    reference = _losses(ref_dir)

    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(K), signame, verb, *args(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    signum = getattr(signal, signame)
    assert proc.returncode == 128 + signum, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith(f"tying {verb}: ")]
    stops = [line for line in lines if "interrupted" in line]
    step_dir = out / "checkpoints" / ckpt.step_dir_name(K)
    assert stops == [
        f"tying {verb}: interrupted by {signame}: stopped after step {K} and wrote its "
        f"checkpoint {step_dir}; continue with {resume_option}"
    ], proc.stderr
    assert proc.stderr.rstrip("\n").splitlines()[-1] == stops[0]
    assert ckpt.checkpoint_problem(step_dir) is None
    assert ckpt.latest_checkpoint(out) == step_dir
    assert sorted(_losses(out)) == list(range(1, K + 1))  # it stopped after step K
    assert not (out / ".lock").exists()

    capsys.readouterr()
    assert main([verb, *args(out, resume=True)]) == 0
    assert f"resuming from step {K} ({step_dir})" in capsys.readouterr().err
    resumed = _losses(out)
    assert sorted(resumed) == list(range(1, STEPS + 1))
    for step in (K + 1, K + 2):
        assert resumed[step] == reference[step], (step, resumed[step], reference[step])
    assert _rows(out) == _rows(ref_dir)
    assert len(set(reference.values())) == STEPS
    case = "lora" if verb == "finetune" else "default"
    final, final_ref = _final_weights(case, out), _final_weights(case, ref_dir)
    assert final.keys() == final_ref.keys()
    assert all(torch.equal(final[k], final_ref[k]) for k in final), "final weights differ"


def _train_cfg(small_corpus, out: Path, **overrides) -> TrainConfig:
    return load_config(TrainConfig, None, small_run(small_corpus, out, **overrides))


def test_a_signal_before_the_first_step_stops_at_once(small_corpus, tmp_path, monkeypatch) -> None:
    """SIGTERM while the run is being built (tokenizing, loading): stopped at once, exit status
    143 on the exception, nothing left behind, and the handlers of before are back."""
    from tying.train import run as train_run

    real_build = train_run.build_setup

    def build_then_signal(*args, **kwargs):
        real_build(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the signal did not stop the run")  # pragma: no cover

    monkeypatch.setattr(train_run, "build_setup", build_then_signal)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted) as caught:
        train(_train_cfg(small_corpus, out))
    assert caught.value.exit_status == 143 and caught.value.checkpoint is None
    assert str(caught.value) == ("interrupted by SIGTERM: stopped at once; no checkpoint was kept")
    assert not out.exists()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


@pytest.mark.parametrize("verb", ["train", "finetune"])
def test_one_used_folder_policy(verb, small_corpus, tiny_teacher, tmp_path, capsys) -> None:
    """A folder holding anything (but a lock file) is refused without resume, by both verbs in
    the same words, before anything is read or written."""
    out = tmp_path / "used"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    if verb == "finetune":
        args = _lora_args(tiny_teacher, _qa_task(tmp_path), out, STEPS)
        resume_option, other = "--resume", "another output folder"
    else:
        args, resume_option, other = small_run(small_corpus, out), "resume=true", "another out"
    assert main([verb, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"tying {verb}: error: {out} already holds a run (notes.txt): pass {resume_option} to "
        f"continue it, or choose {other} (nothing was overwritten)"
    ]
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_resume_with_nothing_to_resume_says_so(small_corpus, tmp_path, capsys) -> None:
    """resume=true in a folder without checkpoints: one line, then a run from step 1 (the
    earlier run's metrics and TensorBoard files are not mixed into it)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text(json.dumps({"step": 9, "loss": 1.0}) + "\n")
    (out / "tensorboard").mkdir()
    (out / "tensorboard" / "events.out.tfevents.old").write_bytes(b"old")
    assert main(["train", *small_run(small_corpus, out, max_steps=2, resume=True)]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "resume" in line]
    assert said == [
        f"tying train: warning: resume: {out} holds no checkpoint to resume from; starting at "
        "step 1"
    ]
    assert sorted(_losses(out)) == [1, 2]
    assert not (out / "tensorboard").exists()


@pytest.fixture(scope="module")
def reference_run(small_corpus, tmp_path_factory) -> Path:
    """An uninterrupted 6-step run (checkpoints every 2 steps): what a resumed run must repeat."""
    out = tmp_path_factory.mktemp("reference") / "run"
    train(_train_cfg(small_corpus, out, max_steps=6))
    return out


@pytest.fixture(scope="module")
def four_steps(small_corpus, tmp_path_factory) -> Path:
    """The reference run's first 4 steps (checkpoints at 2 and 4), as a folder to copy."""
    out = tmp_path_factory.mktemp("four-steps") / "run"
    train(_train_cfg(small_corpus, out, max_steps=4))
    return out


def _damage(path: Path) -> None:
    """Cut a file to a part of itself (optimizer.pt to 5 kB, as in the issue's report); a YAML
    file, which may still parse when cut, gets bytes that are not UTF-8 in its second half."""
    data = path.read_bytes()
    keep = 5_000 if path.name == "optimizer.pt" and len(data) > 5_000 else len(data) // 2
    tail = b"\xff\xfe" * 8 if path.suffix == ".yaml" else b""
    path.write_bytes(data[:keep] + tail)


@pytest.mark.parametrize(
    "name", ["model.safetensors", "optimizer.pt", "rng.safetensors", "trainer.json", "config.yaml"]
)
def test_a_damaged_newest_checkpoint_falls_back(
    name, small_corpus, reference_run, four_steps, tmp_path, capsys
) -> None:
    """Any damaged file of the newest checkpoint: the resume warns in one line naming the file,
    continues from the previous intact checkpoint and repeats the uninterrupted run's losses."""
    out = tmp_path / "run"
    shutil.copytree(four_steps, out)
    newest = out / "checkpoints" / ckpt.step_dir_name(4)
    _damage(newest / name)
    problem = ckpt.checkpoint_problem(newest)
    assert problem is not None and problem.startswith(f"{newest / name} is damaged")
    capsys.readouterr()
    assert main(["train", *small_run(small_corpus, out, max_steps=6, resume=True)]) == 0
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if "warning" in line]
    previous = out / "checkpoints" / ckpt.step_dir_name(2)
    assert warnings == [
        f"tying train: warning: resume: skipping a damaged checkpoint: {problem}; falling back "
        f"to {previous.name}"
    ]
    assert f"tying train: resuming from step 2 ({previous})" in err
    assert _losses(out) == _losses(reference_run)


def test_every_file_of_a_checkpoint_is_loaded(tmp_path) -> None:
    """An extra file of a run (config.yaml) counts: a torn one makes the checkpoint bad; a .pt
    file holding objects torch.load(weights_only=True) refuses is bad too."""
    path = ckpt.save_checkpoint(
        tmp_path,
        1,
        {"w": torch.ones(2)},
        {"state": {}},
        {"sampler": {}},
        extra_files=lambda folder: (folder / "config.yaml").write_text("a: [1, 2\n"),
    )
    assert ckpt.checkpoint_problem(path).startswith(f"{path / 'config.yaml'} is damaged")
    (path / "config.yaml").write_text("a: [1, 2]\n")
    assert ckpt.checkpoint_problem(path) is None
    torch.save({"x": torch.ones(1), "f": print}, path / "optimizer.pt")  # not weights-only
    assert "weights_only=True" in ckpt.checkpoint_problem(path)


def _full_disk_writer(real, after: int = 100):
    """`real(obj, path)` as it would be on a disk that fills after `after` bytes of the file:
    the bytes written part-way, then OSError(ENOSPC)."""

    def write(obj, path: Path) -> None:
        real(obj, path)
        data = path.read_bytes()
        path.write_bytes(data[:after])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    return write


@pytest.mark.parametrize("writer", ["save_object", "save_tensors"])
def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one(
    writer, small_corpus, reference_run, tmp_path, capsys, monkeypatch
) -> None:
    """ENOSPC part-way through optimizer.pt (torch.save) or model.safetensors at the step-4
    checkpoint: one line, exit status 1, the step-2 checkpoint intact and `latest`, no torn
    folder; resume=true then finishes the run with the uninterrupted run's losses."""
    real = getattr(ckpt, writer)
    failing = _full_disk_writer(real)

    def at_step_4(obj, path: Path) -> None:
        if ckpt.step_dir_name(4) in path.parent.name and path.name in (
            "optimizer.pt",
            "model.safetensors",
        ):
            return failing(obj, path)
        return real(obj, path)

    monkeypatch.setattr(ckpt, writer, at_step_4)
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(["train", *small_run(small_corpus, out, max_steps=6)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    previous = out / "checkpoints" / ckpt.step_dir_name(2)
    assert err[-1] == (
        "tying train: error: could not write the checkpoint of step 4 (No space left on device); "
        f"the previous checkpoint {previous} is intact: free some space, then resume"
    )
    assert [line for line in err if "error" in line] == [err[-1]]
    assert ckpt.list_checkpoints(out) == [previous]
    assert ckpt.latest_checkpoint(out) == previous
    assert ckpt.checkpoint_problem(previous) is None
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["latest", previous.name]
    monkeypatch.setattr(ckpt, writer, real)
    assert main(["train", *small_run(small_corpus, out, max_steps=6, resume=True)]) == 0
    assert _losses(out) == _losses(reference_run)


@pytest.mark.skipif(not Path("/dev/full").is_char_device(), reason="needs /dev/full (Linux)")
def test_the_checkpoint_writers_raise_oserror_on_a_full_disk() -> None:
    """/dev/full answers every write with ENOSPC: both writers raise OSError (a path handed
    to torch.save would raise its C++ writer's RuntimeError instead)."""
    with pytest.raises(OSError) as caught:
        ckpt.save_object({"x": torch.ones(10_000)}, Path("/dev/full"))
    assert caught.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as caught:
        ckpt.save_tensors({"x": torch.ones(10_000)}, Path("/dev/full"))
    assert caught.value.errno == errno.ENOSPC


def test_tensorboard_shows_a_resumed_run_once(small_corpus, reference_run, tmp_path) -> None:
    """A run that logged steps 1-4 but kept only the step-2 checkpoint (killed before the next
    one), resumed to step 6: TensorBoard's reading of the event files has each step once, with
    the values of metrics.jsonl (the resumed writer purges the earlier file's steps 3-4)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    train(_train_cfg(small_corpus, out, max_steps=4, tensorboard=True))
    shutil.rmtree(out / "checkpoints" / ckpt.step_dir_name(4))
    (out / "checkpoints" / ckpt.LATEST).write_text(ckpt.step_dir_name(2) + "\n")
    train(_train_cfg(small_corpus, out, max_steps=6, tensorboard=True, resume=True))
    assert len(list((out / "tensorboard").iterdir())) == 2  # the earlier file and the new one
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    scalars = events.Scalars("loss")
    assert [s.step for s in scalars] == [1, 2, 3, 4, 5, 6]
    losses = _losses(out)
    assert [s.value for s in scalars] == pytest.approx([losses[s] for s in range(1, 7)])
    assert losses == _losses(reference_run)
    assert [r["step"] for r in read_metrics(out) if "loss" in r] == [1, 2, 3, 4, 5, 6]
