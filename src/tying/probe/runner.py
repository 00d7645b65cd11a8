"""`run_probe`: load one model (and optionally a second), compute every view, write the report.

Outputs in the output folder:

    probe.json              every number (the contract: docs/metrics.md, "probe.json")
    probe.md                the same numbers as tables with units, the plots linked
    probe.html              the same page, self-contained (plots embedded)
    norm_frequency.png      row norm against log frequency, E and U
    spectra.png             singular values of E and U
    drift.png               drift curves (training runs with >= 2 checkpoints)

A block that cannot be computed for this model (e.g. consistency of a model with V < d) is
reported as {"error": message} and the others still run; a block that does not apply or was
skipped is left out and named under "skipped" with the reason.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tying.options.probe import BLOCK_ALIASES as BLOCK_ALIASES
from tying.options.probe import BLOCKS as BLOCKS
from tying.options.probe import ProbeOptions as ProbeOptions
from tying.options.probe import parse_skip as parse_skip
from tying.probe import compare
from tying.probe.matrices import InterfaceMatrices, interface_matrices, model_info
from tying.probe.stages import Stages

#: Version of the probe.json layout.
PROBE_FORMAT = 1
#: Exceptions that turn a block into {"error": ...} instead of stopping the probe.
BLOCK_ERRORS = (ValueError, KeyError, torch.linalg.LinAlgError)


@dataclass
class _Figures:
    """Data kept for the plots (not part of probe.json)."""

    norm_points: dict[str, Any] | None = None
    norm_rho: dict[str, float] | None = None


class _Report:
    """The probe.json dict under construction, with error/skip bookkeeping."""

    def __init__(self, stages: Stages) -> None:
        self.data: dict[str, Any] = {"format": PROBE_FORMAT}
        self.skipped: dict[str, str] = {}
        self.errors: list[str] = []
        self.stages = stages

    def skip(self, block: str, reason: str) -> None:
        self.skipped[block] = reason
        self.stages.log(f"{block}: skipped ({reason})")

    def error(self, block: str, err: Exception) -> None:
        message = f"{type(err).__name__}: {err}"
        self.data[block] = {"error": message}
        self.errors.append(block)
        self.stages.log(f"{block}: error: {message}")


def _compute(report: _Report, skip: frozenset[str], name: str, fn: Any, detail: str = "") -> None:
    """report.data[name] = fn(), timed as stage `name`; skipped or turned into an error."""
    if name in skip:
        report.skip(name, "--skip")
        return
    with report.stages(name, detail):
        try:
            report.data[name] = fn()
        except BLOCK_ERRORS as err:
            report.error(name, err)


def _load(spec: str, tokenizer: str | None, dtype: torch.dtype) -> Any:
    from tying.loader import load_any

    return load_any(spec, dtype=dtype, tokenizer=tokenizer)


def _single_model(options: ProbeOptions, report: _Report, figures: _Figures) -> InterfaceMatrices:
    """Load model A, run its blocks; returns its matrices (the model itself is released)."""
    from tying.probe import views
    from tying.probe.matrices import parameter_total

    stages, skip = report.stages, options.skip
    with stages("load", options.spec):
        loaded = _load(options.spec, options.tokenizer, getattr(torch, options.dtype))
    with stages("matrices"):
        mats = interface_matrices(loaded)
    report.data["model"] = model_info(loaded, mats)

    _compute(report, skip, "consistency", lambda: views.consistency_view(mats))
    _compute(
        report,
        skip,
        "params",
        lambda: views.params_view(
            parameter_total(loaded.model, loaded.interface),
            loaded.interface.num_parameters(),
            mats,
        ),
    )
    _compute(report, skip, "spectra", lambda: views.spectra_view(mats))
    _norm_frequency(options, loaded, mats, report, figures)
    _drift(options, loaded, report)
    return mats


def _norm_frequency(
    options: ProbeOptions, loaded: Any, mats: InterfaceMatrices, report: _Report, figures: _Figures
) -> None:
    from tying.probe.corpus import corpus_token_counts
    from tying.probe.views import norm_frequency_view

    if "norm_frequency" in options.skip:
        report.skip("norm_frequency", "--skip")
        return
    if loaded.tokenizer is None:
        report.skip("norm_frequency", "the model has no tokenizer (pass --tokenizer)")
        return
    stages = report.stages
    try:
        with stages("corpus", f"{options.corpus_tokens or 'all'} tokens"):
            source = _corpus_source(options.corpus)
            counts, info = corpus_token_counts(
                source, loaded.tokenizer, mats.vocab_size, options.corpus_tokens
            )
        with stages("norm_frequency"):
            block, points = norm_frequency_view(mats, counts, options.min_count)
    except BLOCK_ERRORS as err:
        report.error("norm_frequency", err)
        return
    report.data["norm_frequency"] = {
        "corpus": str(source),
        "tokens": info["tokens"],
        "documents": info["documents"],
        "capped": info["capped"],
        "distinct_tokens": int((counts > 0).sum()),
        **block,
    }
    figures.norm_points = points
    figures.norm_rho = {label: block[label]["spearman_rho"] for label in points}


def _corpus_source(corpus: str | None) -> Any:
    """The text source of the token counts (default: the Gutenberg validation books).

    Raises:
        FileNotFoundError: a path or glob that matches no file.
    """
    from tying.data.corpus import default_validation_source, resolve_source
    from tying.data.readers import is_hf_source, resolve_files

    if corpus is None:
        return default_validation_source()
    source = resolve_source(corpus)
    if not is_hf_source(source):
        resolve_files(source)
    return source


def _drift(options: ProbeOptions, loaded: Any, report: _Report) -> None:
    from tying.probe.checkpoints import checkpoint_matrices, drift_inputs
    from tying.probe.views import drift_view

    if "drift" in options.skip:
        report.skip("drift", "--skip")
        return
    if loaded.kind != "run":
        report.skip("drift", "not a training run")
        return
    folders = drift_inputs(loaded)
    if len(folders) < 2:
        report.skip("drift", f"{len(folders)} checkpoint(s); drift needs at least 2")
        return
    with report.stages("drift", f"{len(folders)} checkpoints"):
        try:
            report.data["drift"] = drift_view(
                checkpoint_matrices(loaded.model, loaded.interface, folders)
            )
        except BLOCK_ERRORS as err:
            report.error("drift", err)


def _comparison(options: ProbeOptions, a: InterfaceMatrices, report: _Report) -> None:
    """Load model B and run the comparison blocks."""
    stages, skip = report.stages, options.skip
    with stages("load_against", options.against):
        loaded = _load(options.against, options.against_tokenizer, getattr(torch, options.dtype))
        b = interface_matrices(loaded)
    report.data["against"] = model_info(loaded, b)
    del loaded
    try:
        idx_a, idx_b, match = compare.vocab_match(a, b)
    except BLOCK_ERRORS as err:
        report.error("vocab_match", err)
        return
    report.data["vocab_match"] = match
    stages.log(f"vocab_match: {match['matched']} tokens matched (by {match['by']})")
    named = compare.named_matrices(a, b, idx_a, idx_b, options.maps)
    pairs = compare.paper_direction(named, compare.pairs_of(options.pairs))
    common = {"maps": options.maps, "pair_set": options.pairs}

    _compute(
        report,
        skip,
        "alignment",
        lambda: {**common, **compare.alignment_block(named, pairs, options.identity)},
        f"{len(pairs)} pairs",
    )

    wanted = [block for block in ("knn_overlap", "spectral_distance") if block not in skip]
    for block in ("knn_overlap", "spectral_distance"):
        if block in skip:
            report.skip(block, "--skip")
    if not wanted:
        return
    K = max(
        options.k if "knn_overlap" in wanted else 0,
        options.spectral_k if "spectral_distance" in wanted else 0,
    )
    names = {name for pair in pairs for name in pair}
    with stages("knn_search", f"KNN@{K}"):
        try:
            lists = compare.neighbour_lists(named, names, K, stages.log)
        except BLOCK_ERRORS as err:
            for block in wanted:
                report.error(block, err)
            return
    if "knn_overlap" in wanted:
        _compute(
            report,
            skip,
            "knn_overlap",
            lambda: {**common, **compare.knn_block(named, pairs, lists, options.k)},
        )
    if "spectral_distance" in wanted:
        _compute(
            report,
            skip,
            "spectral_distance",
            lambda: {
                **common,
                **compare.spectral_block(
                    named,
                    pairs,
                    lists,
                    options.spectral_k,
                    options.n_components,
                    stages.log,
                    options.spectral_definition,
                ),
            },
        )


def _plots(report: _Report, figures: _Figures, out: Path) -> dict[str, str]:
    from tying.probe import plots

    files: dict[str, str] = {}
    data = report.data
    name = data["model"]["name"]
    if figures.norm_points is not None and figures.norm_rho is not None:
        points, rho = figures.norm_points, figures.norm_rho
        if data["model"]["shares_matrix"]:  # one matrix: one panel
            points, rho = {"E = U": points["E"]}, {"E = U": rho["E"]}
        path = plots.plot_norm_frequency(
            points,
            rho,
            out / "norm_frequency.png",
            title=f"{name}: row norm vs log frequency",
        )
        files["norm_frequency"] = path.name
    spectra = data.get("spectra")
    if spectra and "error" not in spectra:
        curves = {label: spectra[label]["singular_values"] for label in ("E", "U")}
        if data["model"]["shares_matrix"]:
            curves = {"E = U (tied)": curves["E"]}
        files["spectra"] = plots.plot_spectra(curves, out / "spectra.png").name
    drift = data.get("drift")
    if drift and "error" not in drift:
        curves = {label: drift[label] for label in ("E", "U")}
        if data["model"]["shares_matrix"]:
            curves = {"E = U (tied)": drift["E"]}
        files["drift"] = plots.plot_drift(drift["steps"], curves, out / "drift.png").name
    return files


def _finite(value: Any) -> Any:
    """JSON-safe copy: inf/nan floats become None (strict JSON has no Infinity/NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


@dataclass
class ProbeResult:
    """What `run_probe` produced.

    Attributes:
        report: the probe.json content.
        json_path, markdown_path, html_path: the files written (probe.html: the same page as
            probe.md, self-contained).
        plots: plot name -> PNG path.
        errors: blocks that failed (each {"error": ...} in the report).
    """

    report: dict[str, Any]
    json_path: Path
    markdown_path: Path
    html_path: Path
    plots: dict[str, Path]
    errors: list[str]


def run_probe(options: ProbeOptions, out: str | Path | None = None) -> ProbeResult:
    """Probe a model (and compare it with `options.against`): probe.json, .md, .html, PNGs;
    one INFO line per stage start and end on the `tying.probe.stages` logger.

    Args:
        options: the model(s) and settings.
        out: output folder (created); None = `options.out`, else probe-<spec's last part>.

    Returns:
        The `ProbeResult`.

    Raises:
        FileNotFoundError: a spec or corpus path that does not exist (checked first).
        ValueError: an unsupported model or tokenizer (loading errors stop the probe; errors
            inside a block are reported in that block).
    """
    from tying.probe.report import write_probe_documents

    start = time.perf_counter()
    out = Path(out or options.out or f"probe-{Path(options.spec).name or 'model'}")
    stages = Stages()
    report = _Report(stages)
    figures = _Figures()
    if "norm_frequency" not in options.skip:
        _corpus_source(options.corpus)  # a missing corpus fails before the slow stages
    mats = _single_model(options, report, figures)
    if options.against is not None:
        _comparison(options, mats, report)
    del mats
    # Only once the models loaded: a failed start writes nothing.
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    if "plots" in options.skip:
        report.skip("plots", "--skip")
    else:
        with stages("plots"):
            files = _plots(report, figures, out)
    report.data["plots"] = files
    report.data["skipped"] = report.skipped
    report.data["errors"] = report.errors
    report.data["timings_s"] = {**stages.timings, "total": round(time.perf_counter() - start, 3)}
    data = _finite(report.data)
    json_path = out / "probe.json"
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    md_path, html_path = write_probe_documents(data, out)
    return ProbeResult(
        report=data,
        json_path=json_path,
        markdown_path=md_path,
        html_path=html_path,
        plots={k: out / v for k, v in files.items()},
        errors=list(report.errors),
    )
