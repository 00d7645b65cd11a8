"""probe.md and probe.html: the numbers of probe.json as tables with units, with the plots.

One `tying.report.Document` holds both: probe.md links the PNGs relatively (they sit beside
it), probe.html is one self-contained page (PNGs embedded) written by the same writer as the
experiment's report.html.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tying.report import Column, Document, Figure, Section, Table

#: Unit of each consistency key (docs/metrics.md §1).
CONSISTENCY_UNITS = {
    "delta_ti": "unitless, ‖W_out E − I‖_F",
    "delta_ti_rel": "unitless, delta_ti / sqrt(d)",
    "cosine_distance": "unitless, [0, 2]",
    "procrustes_error": "unitless, [0, sqrt 2]",
    "principal_angle_max": "radians",
    "principal_angle_mean": "radians",
}


#: Significant digits of the drift cosines: a drift of 3e-6 reads 0.999997, not 1.
DRIFT_DIGITS = 7


def _table(
    header: list[str], rows: list[list[Any]], title: str | None = None, digits: int = 4
) -> Table:
    """A Table from a header and row lists (cells formatted by `tying.report.format_value`
    with `digits` significant digits)."""
    columns = [Column(f"c{i}", name, digits=digits) for i, name in enumerate(header)]
    return Table(columns, [{f"c{i}": v for i, v in enumerate(row)} for row in rows], title)


def _error(sec: Section, block: Any) -> bool:
    """Add the block's error to `sec`; True when there was one."""
    if isinstance(block, dict) and "error" in block:
        sec.add(f"**Error:** `{block['error']}`")
        return True
    return False


def _image(sec: Section, data: dict[str, Any], folder: Path, key: str, caption: str) -> None:
    name = data.get("plots", {}).get(key)
    if name:
        sec.add(Figure(folder / name, caption))


def _model(doc: Document, info: dict[str, Any]) -> None:
    rows = [
        ["spec", f"`{info['spec']}`"],
        ["kind", info["kind"]],
        ["vocabulary size V (tokens)", info["vocab_size"]],
        ["hidden size d", info["d_model"]],
        ["tie", info["tie"]],
        ["interface", info["interface"]],
        ["blocks", info["n_layers"]],
        ["embedding multiplier s", info["embed_scale"]],
        ["final-norm gain g", "yes" if info["final_norm_gain"] else "none"],
        ["tokenizer", info.get("tokenizer") or "none"],
    ]
    if info.get("checkpoint"):
        rows.append(["checkpoint", f"`{info['checkpoint']}` (step {info.get('step')})"])
    doc.section("Model").add(_table(["field", "value"], rows))


def _consistency(doc: Document, data: dict[str, Any], folder: Path) -> None:
    block = data["consistency"]
    sec = doc.section("Interface consistency (PIT paper §5.5)")
    if _error(sec, block):
        return
    sec.add(
        "`raw`: the stored E and U = W_outᵀ; `effective`: s·E and U diag(g), the maps the "
        "network applies (docs/metrics.md §1)."
    )
    rows = [
        [key, unit, block["raw"][key], block["effective"][key]]
        for key, unit in CONSISTENCY_UNITS.items()
    ]
    sec.add(_table(["metric", "unit", "raw", "effective"], rows))


def _params(doc: Document, data: dict[str, Any], folder: Path) -> None:
    p = data["params"]
    sec = doc.section("Parameters (bias paper, Appendix A)")
    if _error(sec, p):
        return
    rows = [
        ["total (tied matrix once)", p["total"]],
        ["embedding (token interface)", p["embedding"]],
        ["non-embedding", p["non_embedding"]],
        ["embedding share", f"{100 * p['embedding_share']:.2f} %"],
        ["tying saves (2Vd − embedding)", p["tying_saves"]],
        ["untied total", p["untied_total"]],
        [
            "share of the untied model that tying removes",
            f"{100 * p['tying_potential_share']:.2f} %",
        ],
    ]
    sec.add(_table(["parameters", "count"], rows))


def _spectra(doc: Document, data: dict[str, Any], folder: Path) -> None:
    block = data["spectra"]
    sec = doc.section("Singular values")
    if _error(sec, block):
        return
    rows = [
        [label, block[label]["max"], block[label]["min"], block[label]["condition_number"]]
        for label in ("E", "U")
    ]
    header = ["matrix", "σ_max (weight units)", "σ_min (weight units)", "σ_max/σ_min"]
    sec.add(_table(header, rows))
    _image(sec, data, folder, "spectra", "singular values of E and U (weight units, log scale)")


def _norm_frequency(doc: Document, data: dict[str, Any], folder: Path) -> None:
    block = data["norm_frequency"]
    sec = doc.section("Row norm against log frequency (bias paper §5.2)")
    if _error(sec, block):
        return
    sec.add(
        f"Corpus `{block['corpus']}`: {block['tokens']:,} tokens"
        f"{' (capped)' if block['capped'] else ''}, {block['distinct_tokens']:,} distinct."
    )
    rows = [
        [label, block[label]["spearman_rho"], block[label]["p_value"], block[label]["n_tokens"]]
        for label in ("E", "U")
    ]
    sec.add(_table(["matrix", "Spearman ρ (unitless)", "p-value", "tokens"], rows))
    _image(sec, data, folder, "norm_frequency", "row norm against log relative frequency")


def _drift(doc: Document, data: dict[str, Any], folder: Path) -> None:
    block = data["drift"]
    sec = doc.section("Drift across checkpoints (bias paper §5.1)")
    if _error(sec, block):
        return
    sec.add("Mean per-token cosine (unitless) to the first and to the previous checkpoint.")
    E, U = block["E"], block["U"]
    rows = []
    for t, step in enumerate(block["steps"]):
        prev_e = E["to_previous"][t - 1] if t else None
        prev_u = U["to_previous"][t - 1] if t else None
        rows.append([step, E["to_first"][t], prev_e, U["to_first"][t], prev_u])
    header = ["step", "E: to first", "E: to previous", "U: to first", "U: to previous"]
    sec.add(_table(header, rows, digits=DRIFT_DIGITS))
    caption = "drift curves: mean per-token cosine to the first and to the previous checkpoint"
    if data["model"].get("shares_matrix"):
        caption += " (E and U are one matrix: one curve of each)"
    _image(sec, data, folder, "drift", caption)


def _alignment(sec: Section, block: dict[str, Any]) -> None:
    mode = block.get("identity_mode", "raw")
    rows = [
        [
            r.get("label", f"{r['source']} → {r['target']}"),
            r["identity"],
            r["orthogonal"],
            r["linear"],
        ]
        for r in block["pairs"]
    ]
    sec.add(
        _table(
            ["source → target", "identity", "orthogonal", "linear"],
            rows,
            "Alignment (mean cosine after the map; unitless, [−1, 1])",
        )
    )
    sec.add(
        f"Maps: {block['maps']}; columns are the fitted map of the source onto the target, in "
        f"the bias paper's direction (untied onto tied, input onto output); identity on {mode} "
        "rows (docs/metrics.md §2)."
    )


def _comparison(doc: Document, data: dict[str, Any]) -> None:
    sec = doc.section("Comparison with a second model (bias paper §4.1, Appendix B)")
    b = data["against"]
    sec.add(
        f"A = `{data['model']['name']}` ({data['model']['tie']}), "
        f"B = `{b['name']}` ({b['tie']}, `{b['spec']}`)."
    )
    match = data.get("vocab_match")
    if match is None or _error(sec, match):
        return
    sec.add(
        f"Vocabularies matched by token {match['by']}: {match['matched']:,} tokens "
        f"(V_A = {match['vocab_a']:,}, V_B = {match['vocab_b']:,})."
    )
    blocks = [data[k] for k in ("alignment", "knn_overlap", "spectral_distance") if k in data]
    maps = next((blk["maps"] for blk in blocks if "maps" in blk), "raw")
    for label, info in (("A", data["model"]), ("B", b)):
        if info["shares_matrix"] and maps == "raw":
            sec.add(
                f"{label} is tied ({info['tie']}): {label}.input and {label}.output are one matrix."
            )
    if "alignment" in data and not _error(sec, data["alignment"]):
        _alignment(sec, data["alignment"])
    if "knn_overlap" in data and not _error(sec, block := data["knn_overlap"]):
        rows = [[r.get("label", f"{r['a']} – {r['b']}"), r["overlap"]] for r in block["pairs"]]
        title = "KNN overlap (fraction of shared cosine neighbours; unitless, [0, 1])"
        sec.add(_table(["pair", f"KNN@{block['k']}"], rows, title))
    if "spectral_distance" in data and not _error(sec, block := data["spectral_distance"]):
        rows = [[r.get("label", f"{r['a']} – {r['b']}"), r["distance"]] for r in block["pairs"]]
        title = "Spectral distance (unitless, ≥ 0; 0 = equal kNN graphs)"
        sec.add(_table(["pair", "distance"], rows, title))
        sec.add(
            f"kNN graphs with k = {block['k']}, omnibus embedding of {block['n_components']} "
            f"components, definition `{block.get('definition', 'union-frobenius')}` "
            "(docs/metrics.md §2)."
        )


def build_document(data: dict[str, Any], folder: str | Path = ".") -> Document:
    """The probe's Document from the probe.json dict (every block present gets a section).

    Args:
        data: the probe.json content.
        folder: where the PNGs named in `data["plots"]` are (the probe's output folder).
    """
    folder = Path(folder)
    doc = Document(f"Probe of {data['model']['name']}")
    _model(doc, data["model"])
    for key, section in (
        ("consistency", _consistency),
        ("params", _params),
        ("spectra", _spectra),
        ("norm_frequency", _norm_frequency),
        ("drift", _drift),
    ):
        if key in data:
            section(doc, data, folder)
    if "against" in data:
        _comparison(doc, data)
    if data.get("skipped"):
        rows = [[k, v] for k, v in data["skipped"].items()]
        doc.section("Not computed").add(_table(["block", "reason"], rows))
    timings = data.get("timings_s", {})
    if timings:
        rows = [[k, v] for k, v in timings.items()]
        doc.section("Timings").add(_table(["stage", "wall-clock time (s)"], rows))
    return doc


def render_markdown(data: dict[str, Any], folder: str | Path = ".") -> str:
    """probe.md from the probe.json dict; figure links relative to `folder`."""
    return build_document(data, folder).markdown(Path(folder))


def write_probe_documents(data: dict[str, Any], folder: str | Path) -> tuple[Path, Path]:
    """Write `folder/probe.md` and `folder/probe.html` (PNGs embedded); returns both paths.

    Raises:
        FileNotFoundError: a PNG named in `data["plots"]` is not in `folder`.
    """
    return build_document(data, folder).write(folder, stem="probe")
