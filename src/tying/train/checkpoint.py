"""Checkpoints: safetensors weights, optimizer and trainer state, written atomically.

Layout of one checkpoint, a folder `checkpoints/step-0000100/`:

    model.safetensors   model weights (for PIT: the interface's z and l_param only)
    optimizer.pt        optimizer state (tensors and numbers; loaded with weights_only=True)
    rng.safetensors     torch CPU (and CUDA) random generator states
    trainer.json        step, tokens, data-sampler position, elapsed time

The folder is written as `.step-0000100.tmp`, every file is fsynced, then it
is renamed into place and `checkpoints/latest` is replaced atomically: a
process killed at any moment leaves either the previous checkpoint or the new
one, never a partial one that loads.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from tying.errors import InvalidInputError, MissingFileError
from tying.outputs import write_text_atomic

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest"

logger = logging.getLogger(__name__)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def step_dir_name(step: int) -> str:
    """`step-0000100` for step 100."""
    return f"step-{step:07d}"


def save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors file of contiguous CPU copies (shared storages are written separately)."""
    save_file({k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}, str(path))


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model_state: dict[str, torch.Tensor],
    optimizer_state: dict[str, Any],
    trainer_state: dict[str, Any],
    keep_last: int = 2,
) -> Path:
    """Write checkpoint `step` atomically under `run_dir/checkpoints`; keep the newest `keep_last`."""
    root = Path(run_dir) / CHECKPOINT_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / step_dir_name(step)
    tmp = root / f".{step_dir_name(step)}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_tensors(model_state, tmp / "model.safetensors")
    torch.save(optimizer_state, tmp / "optimizer.pt")
    rng = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            rng[f"torch_cuda_{i}"] = state
    save_file(rng, str(tmp / "rng.safetensors"))
    (tmp / "trainer.json").write_text(json.dumps({"step": step, **trainer_state}, indent=2))
    for f in tmp.iterdir():
        _fsync_file(f)
    _fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    write_text_atomic(root / LATEST, final.name + "\n")
    _fsync_dir(root)
    for old in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def nonfinite_tensors(tensors: dict[str, torch.Tensor]) -> list[str]:
    """Keys of the floating-point tensors that hold NaN or Inf."""
    return [
        k for k, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())
    ]


def checkpoint_problem(path: str | Path) -> str | None:
    """Why checkpoint folder `path` is not good (missing or damaged files, non-finite
    weights), or None when it is complete, loadable and finite."""
    p = Path(path)
    for name in ("model.safetensors", "optimizer.pt", "rng.safetensors", "trainer.json"):
        if not (p / name).is_file():
            return f"{p / name} is missing"
    try:
        state = load_file(str(p / "model.safetensors"))
    except Exception as e:  # safetensors raises its own error type for damaged files
        return f"{p / 'model.safetensors'} is damaged ({_first_line(e)})"
    bad = nonfinite_tensors(state)
    if bad:
        return f"{p / 'model.safetensors'} holds non-finite values in {bad[0]}"
    try:
        json.loads((p / "trainer.json").read_text())
    except ValueError as e:
        return f"{p / 'trainer.json'} is damaged ({_first_line(e)})"
    return None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def latest_good_checkpoint(run_dir: str | Path) -> tuple[Path | None, list[str]]:
    """The newest checkpoint of a run that `checkpoint_problem` finds good, and the problems of
    the newer ones it skipped (one line each)."""
    skipped = []
    for folder in reversed(list_checkpoints(run_dir)):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder, skipped
        skipped.append(problem)
    return None, skipped


def checkpoint_to_resume(
    run_dir: str | Path, log: Callable[[str], None] | None = None, restart_hint: str = ""
) -> Path | None:
    """The newest good checkpoint of `run_dir` (None: it has none), each newer damaged one
    skipped with a warning (on `log` where given, else on this module's logger).

    Raises:
        ConfigError: there are checkpoints but none is good (`restart_hint` says what to do).
    """
    from tying.config import ConfigError

    found, skipped = latest_good_checkpoint(run_dir)
    for problem in skipped:
        message = f"resume: skipping a checkpoint: {problem}"
        if log is not None:
            log(message)
        else:
            logger.warning("%s", message)
    if found is None and skipped:
        hint = restart_hint or "start again in another output folder"
        raise ConfigError(
            f"no intact checkpoint in {run_dir} to resume from ({skipped[-1]}); {hint}"
        )
    return found


def resume_checkpoint(
    run_dir: str | Path,
    resume: bool,
    refusal: Exception | None,
    check: Callable[[dict[str, Any], Path], None],
    log: Callable[[str], None] | None = None,
    restart_hint: str = "",
) -> Path | None:
    """Where a run starts, the one resume point of `tying train` and `tying finetune`.

    Without `resume`: raise `refusal` if the caller found the folder already used (it says
    what to do; nothing is overwritten), else None (start). With `resume`: the newest good
    checkpoint (`checkpoint_to_resume`), after `check(trainer_state, checkpoint)` has accepted
    the settings it was saved with; None where the folder has no checkpoint yet.
    """
    if not resume:
        if refusal is not None:
            raise refusal
        return None
    found = checkpoint_to_resume(run_dir, log, restart_hint)
    if found is not None:
        check(read_trainer_state(found), found)
    return found


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.glob("step-*") if p.is_dir() and (p / "trainer.json").is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run (by the `latest` pointer, else by name), or None."""
    root = Path(run_dir) / CHECKPOINT_DIR
    pointer = root / LATEST
    if pointer.is_file():
        candidate = root / pointer.read_text().strip()
        if (candidate / "trainer.json").is_file():
            return candidate
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def is_run_spec(spec: str | Path) -> bool:
    """Whether `spec` names a training run, its ``checkpoints/`` folder or one checkpoint folder."""
    path = Path(spec).expanduser()
    if not path.is_dir():
        return False
    return (
        (path / "trainer.json").is_file()
        or (path / "checkpoints").is_dir()
        or (path.name == "checkpoints" and any(path.glob("step-*")))
    )


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder from a checkpoint folder, a run folder, or a `checkpoints/` folder."""
    p = Path(path)
    if (p / "trainer.json").is_file():
        return p
    run_dir = p.parent if p.name == CHECKPOINT_DIR else p
    found = latest_checkpoint(run_dir)
    if found is not None:
        return found
    raise MissingFileError(
        f"no checkpoint found at {p}: expected a run folder with checkpoints/step-*/ "
        "or a checkpoint folder holding trainer.json"
    )


def load_model_state(path: str | Path) -> dict[str, torch.Tensor]:
    """The weights of a checkpoint folder (ValueError naming the file when it is damaged)."""
    file = resolve_checkpoint(path) / "model.safetensors"
    try:
        return load_file(str(file))
    except FileNotFoundError:
        raise
    except Exception as e:  # safetensors raises its own error type for damaged files
        raise InvalidInputError(
            f"{file} is damaged ({_first_line(e)}): use another checkpoint of the run "
            "(checkpoints/step-N)"
        ) from None


def read_trainer_state(path: str | Path) -> dict[str, Any]:
    """trainer.json of a checkpoint folder (ValueError naming the file when it is damaged)."""
    file = resolve_checkpoint(path) / "trainer.json"
    try:
        return json.loads(file.read_text())
    except ValueError as e:
        raise InvalidInputError(f"{file} is damaged ({_first_line(e)})") from None


def load_checkpoint(
    path: str | Path,
) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, Any]]:
    """(model_state, optimizer_state, trainer_state) of a checkpoint folder; restores no RNG.

    Raises:
        ValueError: a damaged file (named).
    """
    p = resolve_checkpoint(path)
    model_state = load_model_state(p)
    try:
        optimizer_state = torch.load(p / "optimizer.pt", weights_only=True, map_location="cpu")
    except (RuntimeError, ValueError, EOFError) as e:
        raise InvalidInputError(f"{p / 'optimizer.pt'} is damaged ({_first_line(e)})") from None
    return model_state, optimizer_state, read_trainer_state(p)


def restore_rng(path: str | Path) -> None:
    """Restore the torch random generator states saved with a checkpoint."""
    rng = load_file(str(resolve_checkpoint(path) / "rng.safetensors"))
    torch.set_rng_state(rng["torch_cpu"])
    if torch.cuda.is_available():
        states = [rng[k] for k in sorted(rng) if k.startswith("torch_cuda_")]
        if states:
            torch.cuda.set_rng_state_all(states)
