"""Train the grid: one run folder per cell, resumable, finished runs skipped.

Cells run in-process, one after another (`tying.train.run.train`): simpler than a
subprocess per cell and it shares the tokenized shards' cache; a failing cell raises and
stops the grid, and the next invocation resumes it from its newest checkpoint.

Several processes may train one grid at once (e.g. `tying experiment CFG --train-only`
started three times on one GPU): a cell whose folder another live process holds (its run
lock, `tying.train.lock`) is left to that process and the grid goes on with the next cell, so
the processes share the cells out among themselves. `run_grid` returns such a cell as state
"held"; `require_trained` refuses to analyse a grid that still has one.

State of a cell's folder:

- finished: `DONE.json` (the TrainResult and the config) is present and metrics.jsonl has
  the final step -> skipped;
- partial: checkpoints but no marker (a killed run) -> resumed with resume=true;
- new: no checkpoint -> trained from the start (a folder a killed run left without a
  checkpoint is passed with resume=true: the run session says it has nothing to resume and
  rewrites its metrics.jsonl).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tying.config import ConfigError, lift_moved_keys, to_dict
from tying.errors import MissingFileError, read_json
from tying.experiment.config import ExperimentConfig, RunSpec
from tying.outputs import write_text_atomic
from tying.train import checkpoint as ckpt
from tying.train.config import TrainConfig, saved_train_config
from tying.train.lock import RunFolderInUseError
from tying.train.metrics import METRICS_FILE, read_metrics

log = logging.getLogger(__name__)

DONE_FILE = "DONE.json"
#: TrainConfig keys that may differ between the run that started a folder and a rerun.
_VOLATILE = ("resume", "progress", "tensorboard")


@dataclass
class RunOutcome:
    """What the grid did with one cell: its state before ("new", "partial", "finished"), or
    "held" (another live process trains it: `result` is empty), and the training result."""

    spec: RunSpec
    run_dir: Path
    state: str
    result: dict[str, Any]


def _comparable(cfg: TrainConfig | dict[str, Any]) -> dict[str, str | None]:
    """{dotted key: value as text} of a config (sections flattened, volatile keys left out)."""
    data = to_dict(cfg) if isinstance(cfg, TrainConfig) else dict(cfg)
    out: dict[str, str | None] = {}
    for key, value in data.items():
        if key in _VOLATILE:
            continue
        if isinstance(value, dict):
            out |= {f"{key}.{k}": v for k, v in _comparable(value).items()}
        else:
            out[key] = str(value) if value is not None else None
    return out


def _saved_config(path: Path) -> dict[str, Any]:
    """A run folder's config.yaml as the current TrainConfig would save it (flat keys of earlier
    versions moved into their sections, defaults filled in); as written when it no longer
    loads."""
    import yaml

    data = yaml.safe_load(path.read_text()) or {}
    try:
        return to_dict(saved_train_config(data, str(path)))
    except ConfigError:
        return lift_moved_keys(TrainConfig, data, str(path), warn=False)


def run_state(run_dir: str | Path, max_steps: int) -> str:
    """ "finished", "partial" or "new" (see the module docstring)."""
    run_dir = Path(run_dir)
    if (run_dir / DONE_FILE).is_file() and (run_dir / METRICS_FILE).is_file():
        steps = [r["step"] for r in read_metrics(run_dir) if "loss" in r]
        if steps and max(steps) >= max_steps:
            return "finished"
    return "partial" if ckpt.list_checkpoints(run_dir) else "new"


def read_done(run_dir: str | Path) -> dict[str, Any]:
    """The DONE.json marker of a finished run."""
    path = Path(run_dir) / DONE_FILE
    if not path.is_file():
        raise MissingFileError(f"{path} does not exist: the run has not finished (run the grid)")
    return read_json(path, "run marker")


def _check_same_config(run_dir: Path, cfg: TrainConfig, keys: set[str]) -> None:
    """Refuse to skip or resume a run whose folder was trained with other values of `keys`.

    Only the keys the experiment sets are compared, so that a newer TrainConfig default (or
    a new field) does not invalidate finished runs.
    """
    path = run_dir / "config.yaml"
    if not path.is_file():
        return
    old, new = _comparable(_saved_config(path)), _comparable(cfg)
    diff = sorted(k for k in new if k.split(".")[0] in keys and old.get(k) != new[k])
    if diff:
        raise ConfigError(
            f"{run_dir} was trained with other settings ({', '.join(diff)}); use another out "
            "or delete that run folder to retrain it"
        )


def train_cell(cfg: ExperimentConfig, spec: RunSpec, progress: bool = True) -> RunOutcome:
    """Train (or resume, or skip) one cell; writes DONE.json when training returns."""
    from tying.train.run import train
    from tying.train.session import used_folder_entries

    train_cfg = cfg.train_config(spec)
    train_cfg.progress = progress and train_cfg.progress
    run_dir = cfg.run_dir(spec)
    state = run_state(run_dir, train_cfg.max_steps)
    if state != "new":
        _check_same_config(run_dir, train_cfg, cfg.set_keys(spec))
    if state == "finished":
        return RunOutcome(spec, run_dir, state, read_done(run_dir)["result"])
    # a used folder without a checkpoint: the session's resume starts it again at step 1
    train_cfg.resume = state == "partial" or bool(used_folder_entries(run_dir))
    result = train(train_cfg)
    record = {
        "steps": result.steps,
        "tokens": result.tokens,
        "final_loss": result.final_loss,
        "val_loss": result.val_loss,
        "elapsed_s": result.elapsed_s,
    }
    marker = {
        "result": record,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "config": to_dict(train_cfg),
    }
    write_text_atomic(run_dir / DONE_FILE, json.dumps(marker, indent=2, default=str) + "\n")
    if not cfg.keep_optimizer_states:
        prune_optimizer_states(run_dir)
    return RunOutcome(spec, run_dir, state, record)


def prune_optimizer_states(run_dir: str | Path) -> int:
    """Delete optimizer.pt of every checkpoint but the newest; returns the bytes freed.

    A finished run is never resumed from an older checkpoint, and drift reads only
    model.safetensors, so the AdamW moments (2 × the weights) of older checkpoints are dead
    weight: for SmolLM2-135M about 1.1 GB per checkpoint. The pruned checkpoints can no longer
    be loaded with `load_checkpoint` (their weights stay readable).
    """
    found = ckpt.list_checkpoints(run_dir)
    freed = 0
    for folder in found[:-1]:
        path = folder / "optimizer.pt"
        if path.is_file():
            freed += path.stat().st_size
            path.unlink()
    return freed


def run_grid(cfg: ExperimentConfig, progress: bool = True) -> list[RunOutcome]:
    """Train every cell of the grid in order (finished ones skipped, partial ones resumed, ones
    another process is training left to it: state "held")."""
    outcomes = []
    specs = cfg.runs()
    for i, spec in enumerate(specs, 1):
        log.info(f"[{i}/{len(specs)}] {spec.name}")
        try:
            outcome = train_cell(cfg, spec, progress=progress)
        except RunFolderInUseError as error:
            log.info(f"[{i}/{len(specs)}] {spec.name}: left to another process ({error})")
            outcomes.append(RunOutcome(spec, cfg.run_dir(spec), "held", {}))
            continue
        verb = {"finished": "already finished, skipped", "partial": "resumed and finished"}.get(
            outcome.state, "trained"
        )
        log.info(
            f"[{i}/{len(specs)}] {spec.name}: {verb} "
            f"(loss {outcome.result['final_loss']:.4f}, {outcome.result['elapsed_s']:.1f} s)"
        )
        outcomes.append(outcome)
    return outcomes


def require_trained(outcomes: list[RunOutcome]) -> None:
    """Refuse to go on from a grid with cells that other processes are still training.

    Raises:
        RunFolderInUseError: (exit status 2) naming those cells.
    """
    held = [o.spec.name for o in outcomes if o.state == "held"]
    if held:
        raise RunFolderInUseError(
            f"{len(held)} cell(s) of the grid are being trained by another process "
            f"({', '.join(held)}): run again when they have finished"
        )
