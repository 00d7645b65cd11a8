"""The numbers of the report, computed from the finished runs' folders.

Everything comes from files the runs wrote (metrics.jsonl, DONE.json, checkpoints) through
`tying.probe.run_probe` (consistency, parameters, norm-frequency, drift and the tied-vs-untied
comparisons) and `tying lens` (KL per layer). The result is the `report.json` dict:

    {"name", "config", "runs": [per-run record], "by_interface": [seed aggregate],
     "teacher": probe.json of the teacher | None,
     "lens": {"kind", "records": [lens.json records]} | None, "figures": {name: file}}

Per-run record: `name`, `mode`, `tie`, `seed`, `run_dir`, `steps`, `tokens`,
`final_train_loss` (mean of the last `loss_window` logged losses, nats/token), `last_loss`,
`val_loss` (nats/token), `val_ppl`, `wall_time_s`, `tokens_per_s`, `curve` ({steps, loss,
val_steps, val_loss}), `grad_out_share` ({steps, share, smoothed} over the first
`grad_share_steps`, or None), `probe` (its consistency, params, norm_frequency, drift and,
for tied runs with an untied counterpart of the same mode and seed, `against`, alignment,
knn_overlap, spectral_distance), `probe_dir`.

Seed aggregate (one per mode × tie): `mode`, `tie`, `seeds` (count), and for each of
`final_train_loss`, `val_loss` and `val_ppl` the `*_mean`, `*_min` and `*_max` over seeds.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from tying.config import to_dict
from tying.errors import InvalidInputError
from tying.experiment.config import AnalysisSettings, ExperimentConfig, RunSpec
from tying.experiment.runner import read_done
from tying.train.metrics import read_metrics, rolling_mean

log = logging.getLogger(__name__)

#: probe.json blocks copied into the per-run record.
PROBE_KEYS = (
    "model",
    "consistency",
    "params",
    "norm_frequency",
    "drift",
    "against",
    "alignment",
    "knn_overlap",
    "spectral_distance",
    "errors",
)


#: Per-run quantities aggregated over seeds in `by_interface`.
SEED_KEYS = ("final_train_loss", "val_loss", "val_ppl")


def seed_aggregates(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean, min and max over seeds of SEED_KEYS, one row per (mode, tie) in grid order.

    A run whose value is None (e.g. no validation) is left out of that key's statistics; a
    key no run has gives None.
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["mode"], run.get("label", run["tie"])), []).append(run)
    rows = []
    for (mode, label), members in groups.items():
        row: dict[str, Any] = {
            "mode": mode,
            "label": label,
            "tie": members[0]["tie"],
            "seeds": len(members),
        }
        for key in SEED_KEYS:
            values = [r[key] for r in members if r.get(key) is not None]
            row[f"{key}_mean"] = sum(values) / len(values) if values else None
            row[f"{key}_min"] = min(values) if values else None
            row[f"{key}_max"] = max(values) if values else None
        rows.append(row)
    return rows


def run_summary(run_dir: str | Path, settings: AnalysisSettings) -> dict[str, Any]:
    """Loss, validation, wall time, learning curve and gradient share of one finished run."""
    rows = read_metrics(run_dir)
    train_rows = [r for r in rows if r.get("loss") is not None and "lr" in r]
    val_rows = [r for r in rows if r.get("val_loss") is not None]
    if not train_rows:
        raise InvalidInputError(f"{run_dir}/metrics.jsonl has no training rows: did the run start?")
    done = read_done(run_dir)
    losses = [float(r["loss"]) for r in train_rows]
    tail = losses[-settings.loss_window :]
    speeds = [r["tokens_per_s"] for r in train_rows if r.get("tokens_per_s")]
    share_rows = [
        r
        for r in train_rows
        if r.get("grad_out_share") is not None and r["step"] <= settings.grad_share_steps
    ]
    share = None
    if share_rows:
        values = [float(r["grad_out_share"]) for r in share_rows]
        share = {
            "steps": [r["step"] for r in share_rows],
            "share": values,
            "smoothed": rolling_mean(values, settings.grad_share_window),
            "window": settings.grad_share_window,
        }
    last_val = val_rows[-1] if val_rows else None
    return {
        "steps": train_rows[-1]["step"],
        "tokens": train_rows[-1]["tokens"],
        "final_train_loss": sum(tail) / len(tail),
        "loss_window": len(tail),
        "last_loss": losses[-1],
        "val_loss": last_val["val_loss"] if last_val else None,
        "val_ppl": last_val.get("val_ppl") if last_val else None,
        "wall_time_s": done["result"]["elapsed_s"],
        "tokens_per_s": sum(speeds) / len(speeds) if speeds else None,
        "curve": {
            "steps": [r["step"] for r in train_rows],
            "loss": losses,
            "val_steps": [r["step"] for r in val_rows],
            "val_loss": [r["val_loss"] for r in val_rows],
        },
        "grad_out_share": share,
    }


def _probe(
    spec: str,
    out: Path,
    settings: AnalysisSettings,
    corpus: str | None,
    against: str | None = None,
    tokenizer: str | None = None,
) -> dict[str, Any]:
    from tying.probe import ProbeOptions, run_probe

    options = ProbeOptions(
        spec=spec,
        against=against,
        corpus=corpus,
        corpus_tokens=settings.corpus_tokens,
        k=settings.k,
        spectral_k=settings.spectral_k,
        n_components=settings.n_components,
        maps=settings.maps,
        skip=(*settings.skip, "spectra"),
        tokenizer=tokenizer,
    )
    return run_probe(options, out).report


def untied_counterpart(cfg: ExperimentConfig, spec: RunSpec) -> RunSpec | None:
    """The untied run of the same mode and seed, for a tied run in a grid that has one."""
    if spec.tie == "untied":
        return None
    for label, tie in cfg.labels():
        if tie == "untied":
            return RunSpec(spec.mode, label, spec.seed, tie)
    return None


def _eval_text(cfg: ExperimentConfig) -> str | None:
    """The text of the lens and norm-frequency: lens.data, else the runs' val_data."""
    lens = cfg.lens
    if lens.data:
        return lens.data
    val = cfg.train.get("val_data")
    return str(val) if val else None


def run_lens(
    cfg: ExperimentConfig, specs: list[str], out: Path, progress: bool = True
) -> list[dict[str, Any]]:
    """The lenses of the given model specs (`tying.lens.pipeline.run_lens`), in spec order."""
    from tying.lens.pipeline import LensOptions
    from tying.lens.pipeline import run_lens as run_lens_pipeline

    lens = cfg.lens
    seq_len = lens.seq_len or int(cfg.train.get("seq_len", 256))
    options = LensOptions(
        specs=list(specs),
        out=str(out),
        kind=lens.kind,
        data=_eval_text(cfg),
        max_tokens=lens.max_tokens,
        seq_len=seq_len,
        batch_size=lens.batch_size,
        train_steps=lens.tuned_steps,
        train_tokens_per_step=max(seq_len, lens.tuned_tokens_per_step // seq_len * seq_len),
        precision=lens.precision,
        progress=progress,
    )
    return run_lens_pipeline(options).records


def analyze(cfg: ExperimentConfig, progress: bool = True) -> dict[str, Any]:
    """The report.json dict of a finished grid (probes and lens outputs under out_dir/analysis)."""
    settings = cfg.analysis
    root = cfg.root
    analysis_dir = root / "analysis"
    corpus = _eval_text(cfg)
    teacher = None
    if "teacher" in cfg.modes and settings.probe_teacher:
        log.info(f"probe: teacher {cfg.teacher_model}")
        teacher = _probe(cfg.teacher_model, analysis_dir / "probe" / "teacher", settings, corpus)
    runs = []
    for spec in cfg.runs():
        run_dir = cfg.run_dir(spec)
        record: dict[str, Any] = {
            "name": spec.name,
            "mode": spec.mode,
            "tie": spec.tie,
            "label": spec.label,
            "seed": spec.seed,
            "run_dir": str(run_dir),
        }
        record.update(run_summary(run_dir, settings))
        other = untied_counterpart(cfg, spec)
        against = str(cfg.run_dir(other)) if other is not None else None
        probe_dir = analysis_dir / "probe" / spec.name
        log.info(f"probe: {spec.name}" + (f" against {other.name}" if other else ""))
        probe = _probe(
            str(run_dir),
            probe_dir,
            settings,
            corpus,
            against=against,
        )
        record["probe"] = {k: probe[k] for k in PROBE_KEYS if k in probe}
        record["probe_dir"] = str(probe_dir)
        runs.append(record)
    lens_block = None
    lens = cfg.lens
    if lens.kind != "none":
        specs = [r["run_dir"] for r in runs]
        names = [r["name"] for r in runs]
        if "teacher" in cfg.modes and lens.include_teacher:
            specs, names = [cfg.teacher_model, *specs], ["teacher", *names]
        log.info(f"lens ({lens.kind}): {len(specs)} models")
        records = run_lens(cfg, specs, analysis_dir / "lens", progress=progress)
        per_model = len(records) // len(specs)
        for i, record in enumerate(records):
            record["run"] = names[i // per_model]
        lens_block = {"kind": lens.kind, "records": records}
    return {
        "name": cfg.name,
        "config": to_dict(cfg),
        "runs": runs,
        "by_interface": seed_aggregates(runs),
        "teacher": teacher,
        "lens": lens_block,
    }


def finite(value: Any) -> Any:
    """A JSON-safe copy (NaN/inf floats become None)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value
