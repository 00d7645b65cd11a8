"""Checkpoints: safetensors weights, optimizer and trainer state, written atomically.

Layout of one checkpoint, a folder `checkpoints/step-0000100/`:

    model.safetensors   model weights (for PIT: the interface's z and l_param only)
    optimizer.pt        optimizer state (tensors and numbers; loaded with weights_only=True)
    rng.safetensors     torch CPU (and CUDA) random generator states
    trainer.json        step, tokens, data-sampler position, elapsed time
    (config.yaml ...)   what the run adds (`save_checkpoint(extra_files=...)`)

The folder is written as `.step-0000100.tmp`, every file is fsynced, then it
is renamed into place and `checkpoints/latest` is replaced atomically: a
process killed at any moment leaves either the previous checkpoint or the new
one, never a partial one that loads. Every file is written through Python's own
file objects, so a full disk (ENOSPC) part-way through any of them is an OSError:
the temporary folder is removed and `CheckpointWriteError` names the step and
the previous checkpoint, which is left as it was.

A checkpoint is good (`checkpoint_problem`) only when EVERY file of it loads:
safetensors files, `.pt` files (torch.load with weights_only=True), JSON and
YAML files; a resume falls back past damaged ones (`checkpoint_to_resume`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save

from tying.errors import InvalidInputError, MissingFileError
from tying.outputs import write_text_atomic

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest"
#: The files every checkpoint holds (a run may add more: `save_checkpoint(extra_files=...)`).
REQUIRED_FILES = ("model.safetensors", "optimizer.pt", "rng.safetensors", "trainer.json")


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, a quota, an I/O error): the run stops,
    its previous checkpoint intact (exit status 1, one line)."""

    exit_status = 1


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
    """safetensors file of contiguous CPU copies (shared storages are written separately),
    written through a Python file object: a full disk is an OSError, never a silent tear."""
    data = save({k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()})
    with open(path, "wb") as f:
        f.write(data)


def save_object(obj: Any, path: Path) -> None:
    """torch.save of `obj` through a Python file object (a full disk is an OSError; a path
    handed to torch.save tears with a RuntimeError of its C++ writer instead)."""
    with open(path, "wb") as f:
        torch.save(obj, f)


def _rng_state() -> dict[str, torch.Tensor]:
    rng = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            rng[f"torch_cuda_{i}"] = state
    return rng


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model_state: dict[str, torch.Tensor],
    optimizer_state: dict[str, Any],
    trainer_state: dict[str, Any],
    keep_last: int = 2,
    extra_files: Callable[[Path], None] | None = None,
) -> Path:
    """Write checkpoint `step` atomically under `run_dir/checkpoints`; keep the newest `keep_last`.

    Args:
        extra_files: writes the run's own files (e.g. config.yaml) into the checkpoint's
            temporary folder, before it is fsynced and renamed into place.

    Raises:
        CheckpointWriteError: a file could not be written (ENOSPC, EDQUOT, EIO, ...); the
            temporary folder is removed, the previous checkpoints and `latest` are unchanged.
    """
    root = Path(run_dir) / CHECKPOINT_DIR
    final = root / step_dir_name(step)
    tmp = root / f".{step_dir_name(step)}.tmp"
    try:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        save_tensors(model_state, tmp / "model.safetensors")
        save_object(optimizer_state, tmp / "optimizer.pt")
        save_tensors(_rng_state(), tmp / "rng.safetensors")
        write_text_atomic(
            tmp / "trainer.json", json.dumps({"step": step, **trainer_state}, indent=2)
        )
        if extra_files is not None:
            extra_files(tmp)
        for f in tmp.iterdir():
            _fsync_file(f)
        _fsync_dir(tmp)
    except BaseException as e:  # a full disk, or a second Ctrl-C: no torn folder stays behind
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise _write_error(run_dir, step, e) from e
        raise
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    write_text_atomic(root / LATEST, final.name + "\n")
    _fsync_dir(root)
    for old in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _write_error(run_dir: str | Path, step: int, error: OSError) -> CheckpointWriteError:
    """The one line of a checkpoint that could not be written (`error`: the OSError)."""
    reason = error.strerror or _first_line(error)
    hint = "free some space" if error.errno in (errno.ENOSPC, errno.EDQUOT) else "fix the cause"
    previous = latest_checkpoint(run_dir)  # verified when it was written; nothing is loaded
    kept = (
        f"the previous checkpoint {previous} is intact: {hint}, then resume"
        if previous is not None
        else f"no earlier checkpoint exists: {hint}, then start again"
    )
    failure = CheckpointWriteError(
        f"could not write the checkpoint of step {step} ({reason}); {kept}"
    )
    failure.errno = error.errno or errno.EIO
    return failure


def nonfinite_tensors(tensors: dict[str, torch.Tensor]) -> list[str]:
    """Keys of the floating-point tensors that hold NaN or Inf."""
    return [
        k for k, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())
    ]


def _load_any(path: Path) -> Any:
    """The content of one checkpoint file, by its suffix (any other file: its bytes)."""
    if path.suffix == ".safetensors":
        return load_file(str(path))
    if path.suffix == ".pt":
        return torch.load(path, weights_only=True, map_location="cpu")
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    if path.suffix in (".yaml", ".yml"):
        import yaml

        return yaml.safe_load(path.read_text(encoding="utf-8"))
    return path.read_bytes()


def checkpoint_problem(path: str | Path) -> str | None:
    """Why checkpoint folder `path` is not good (a missing file, any file that does not load,
    non-finite weights), or None when every file of it loads and its weights are finite.

    Every file is loaded: safetensors, `.pt` (torch.load, weights_only=True), JSON, YAML; the
    problem names the first bad file, in one line.
    """
    p = Path(path)
    for name in REQUIRED_FILES:
        if not (p / name).is_file():
            return f"{p / name} is missing"
    names = [*REQUIRED_FILES, *sorted(f.name for f in p.iterdir() if f.name not in REQUIRED_FILES)]
    for name in names:
        try:
            content = _load_any(p / name)
        except pickle.UnpicklingError as e:
            return f"{p / name} is refused by torch.load(weights_only=True) ({_first_line(e)})"
        except Exception as e:  # each format raises its own error types for damaged files
            return f"{p / name} is damaged ({type(e).__name__}: {_first_line(e)})"
        if name == "model.safetensors":
            bad = nonfinite_tensors(content)
            if bad:
                return f"{p / name} holds non-finite values in {bad[0]}"
        if name == "trainer.json" and not (isinstance(content, dict) and "step" in content):
            return f"{p / name} is damaged (no step)"
    return None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def latest_good_checkpoint(run_dir: str | Path) -> tuple[Path | None, list[str]]:
    """The newest checkpoint of a run that `checkpoint_problem` finds good, and the problems of
    the newer ones it skipped (one line each)."""
    skipped: list[str] = []
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
        fallback = f"; falling back to {found.name}" if found is not None else ""
        message = f"resume: skipping a damaged checkpoint: {problem}{fallback}"
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
    except pickle.UnpicklingError as e:
        raise InvalidInputError(
            f"{p / 'optimizer.pt'} is refused by torch.load(weights_only=True) ({_first_line(e)})"
        ) from None
    except (RuntimeError, ValueError, EOFError, OSError) as e:
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
