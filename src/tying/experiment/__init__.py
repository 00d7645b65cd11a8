"""`tying experiment`: a grid tie × mode × seed at one token budget, updates, then one report.

    from tying.config import load_config
    from tying.experiment import ExperimentConfig, run_experiment
    cfg = load_config(ExperimentConfig, "configs/experiments/minimal.yaml")
    result = run_experiment(cfg)     # runs/, analysis/, figures/, report.json/.md/.html

- `config`: `ExperimentConfig` (+ `LensSettings`, `AnalysisSettings`, `RunSpec`).
- `runner`: trains the cells in-process, resumable (DONE.json markers).
- `updates`: the update stage (LoRA adapters, their evaluation, side effects, paired
  comparisons), resumable by its output files.
- `analysis`: the report.json numbers (metrics.jsonl, tying.probe, tying lens).
- `plots`, `render`: figures and the Markdown/HTML report (`tying.report`).
- `demo`: the fixed small experiment of `tying demo`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tying.errors import InvalidInputError
from tying.experiment.config import (
    AnalysisSettings,
    ExperimentConfig,
    LensSettings,
    RunSpec,
    load_experiment,
)
from tying.experiment.runner import DONE_FILE, RunOutcome, require_trained, run_grid, run_state
from tying.outputs import write_text_atomic

log = logging.getLogger(__name__)


@dataclass
class ExperimentResult:
    """Paths and content of a finished experiment."""

    report: dict[str, Any]
    json_path: Path
    markdown_path: Path
    html_path: Path
    outcomes: list[RunOutcome]


def write_report(report: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path, Path]:
    """report.json, report.md and report.html (figures in out_dir/figures/)."""
    from tying.experiment.analysis import finite
    from tying.experiment.render import build_document

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = finite(report)
    json_path = out / "report.json"
    write_text_atomic(json_path, json.dumps(data, indent=2) + "\n")
    md, page = build_document(data, out).write(out)
    return json_path, md, page


def update_block(cfg: ExperimentConfig) -> tuple[str, dict[str, Any]]:
    """The report's update block of a finished update stage: ("update_units", ...) with
    `updates.units`, else ("updates", ...)."""
    if cfg.updates.units:
        from tying.experiment.update_units import analyze_units

        return "update_units", analyze_units(cfg)
    from tying.experiment.updates import analyze_updates

    return "updates", analyze_updates(cfg)


def run_updates_only(
    cfg: ExperimentConfig, progress: bool = True, shard: tuple[int, int] | None = None
) -> Path | None:
    """Train the grid (finished cells skipped), run its update stage and write OUT/updates.json
    (the report's update block alone: no probes, lenses or figures).

    With `shard` (i, n) the process runs only its share of the stage's bases
    (`tying.experiment.updates.run_updates`) and writes nothing else (returns None): n such
    processes share the stage out, and a last call without `shard` finds every step done and
    writes updates.json.

    Raises:
        ValueError: the config has no update stage.
    """
    from tying.experiment.analysis import finite
    from tying.experiment.updates import run_updates

    if not cfg.updates.enabled:
        raise InvalidInputError(
            "the config has no update stage: give updates.bases or updates.units"
        )
    require_trained(run_grid(cfg, progress=progress))
    if shard is not None:
        run_updates(cfg, progress=progress, shard=shard)
        return None
    run_updates(cfg, progress=progress)
    key, block = update_block(cfg)
    text = json.dumps({"name": cfg.name, key: finite(block)}, indent=1) + "\n"
    return write_text_atomic(cfg.root / "updates.json", text)


def run_experiment(cfg: ExperimentConfig, progress: bool = True) -> ExperimentResult:
    """Train the grid (resumable), analyse the runs, write the report (progress lines on the
    `tying.experiment.*` loggers; the caller reports the files written)."""
    from tying.experiment.analysis import analyze

    outcomes = run_grid(cfg, progress=progress)
    require_trained(outcomes)
    if cfg.updates.enabled:
        from tying.experiment.updates import run_updates

        run_updates(cfg, progress=progress)
    report = analyze(cfg, progress=progress)
    if cfg.updates.enabled:
        key, report[key] = update_block(cfg)
    json_path, md, page = write_report(report, cfg.root)
    return ExperimentResult(json.loads(json_path.read_text()), json_path, md, page, outcomes)


__all__ = [
    "DONE_FILE",
    "AnalysisSettings",
    "ExperimentConfig",
    "ExperimentResult",
    "LensSettings",
    "RunOutcome",
    "RunSpec",
    "load_experiment",
    "run_experiment",
    "run_grid",
    "run_state",
    "run_updates_only",
    "write_report",
]
