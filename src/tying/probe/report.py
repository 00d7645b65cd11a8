"""probe.md: the numbers of probe.json as Markdown tables with units, plots linked relatively."""

from __future__ import annotations

from typing import Any

#: Unit of each consistency key (docs/metrics.md §1).
CONSISTENCY_UNITS = {
    "delta_ti": "unitless, ‖W_out E − I‖_F",
    "delta_ti_rel": "unitless, delta_ti / sqrt(d)",
    "cosine_distance": "unitless, [0, 2]",
    "procrustes_error": "unitless, [0, sqrt 2]",
    "principal_angle_max": "radians",
    "principal_angle_mean": "radians",
}


def _num(value: Any, digits: int = 4) -> str:
    """A number for a table: ints with separators, floats in 4 significant digits."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value == 0.0:
            return "0"
        if 1e-3 <= abs(value) < 1e5:
            return f"{value:.{digits}g}"
        return f"{value:.{digits - 1}e}"
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_num(v) for v in row) + " |" for row in rows]
    return [*lines, ""]


def _error(block: Any) -> list[str] | None:
    if isinstance(block, dict) and "error" in block:
        return [f"**Error:** `{block['error']}`", ""]
    return None


def _image(data: dict[str, Any], key: str, alt: str) -> list[str]:
    name = data.get("plots", {}).get(key)
    return [f"![{alt}]({name})", ""] if name else []


def _model_lines(info: dict[str, Any]) -> list[str]:
    rows = [
        ["spec", f"`{info['spec']}`"],
        ["kind", info["kind"]],
        ["vocabulary size V", info["vocab_size"]],
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
    return _table(["field", "value"], rows)


def _consistency(data: dict[str, Any]) -> list[str]:
    block = data["consistency"]
    lines = ["## Interface consistency (PIT paper §5.5)", ""]
    if (err := _error(block)) is not None:
        return lines + err
    lines += [
        "`raw`: the stored E and U = W_outᵀ; `effective`: s·E and U diag(g), the maps the "
        "network applies (docs/metrics.md §1).",
        "",
    ]
    rows = [
        [key, unit, block["raw"][key], block["effective"][key]]
        for key, unit in CONSISTENCY_UNITS.items()
    ]
    return lines + _table(["metric", "unit", "raw", "effective"], rows)


def _params(data: dict[str, Any]) -> list[str]:
    p = data["params"]
    lines = ["## Parameters (bias paper, Appendix A)", ""]
    if (err := _error(p)) is not None:
        return lines + err
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
    return lines + _table(["parameters", "count"], rows)


def _spectra(data: dict[str, Any]) -> list[str]:
    block = data["spectra"]
    lines = ["## Singular values", ""]
    if (err := _error(block)) is not None:
        return lines + err
    rows = [
        [label, block[label]["max"], block[label]["min"], block[label]["condition_number"]]
        for label in ("E", "U")
    ]
    lines += _table(
        ["matrix", "σ_max (entry units)", "σ_min", "condition number σ_max/σ_min"], rows
    )
    return lines + _image(data, "spectra", "singular values of E and U")


def _norm_frequency(data: dict[str, Any]) -> list[str]:
    block = data["norm_frequency"]
    lines = ["## Row norm against log frequency (bias paper §5.2)", ""]
    if (err := _error(block)) is not None:
        return lines + err
    lines += [
        f"Corpus `{block['corpus']}`: {block['tokens']:,} tokens"
        f"{' (capped)' if block['capped'] else ''}, {block['distinct_tokens']:,} distinct.",
        "",
    ]
    rows = [
        [label, block[label]["spearman_rho"], block[label]["p_value"], block[label]["n_tokens"]]
        for label in ("E", "U")
    ]
    lines += _table(["matrix", "Spearman ρ (unitless)", "p-value", "tokens"], rows)
    return lines + _image(data, "norm_frequency", "row norm against log frequency")


def _drift(data: dict[str, Any]) -> list[str]:
    block = data["drift"]
    lines = ["## Drift across checkpoints (bias paper §5.1)", ""]
    if (err := _error(block)) is not None:
        return lines + err
    lines += ["Mean per-token cosine (unitless) to the first and to the previous checkpoint.", ""]
    E, U = block["E"], block["U"]
    rows = []
    for t, step in enumerate(block["steps"]):
        prev_e = E["to_previous"][t - 1] if t else None
        prev_u = U["to_previous"][t - 1] if t else None
        rows.append([step, E["to_first"][t], prev_e, U["to_first"][t], prev_u])
    header = ["step", "E: to first", "E: to previous", "U: to first", "U: to previous"]
    return lines + _table(header, rows) + _image(data, "drift", "drift curves")


def _comparison(data: dict[str, Any]) -> list[str]:
    lines = ["## Comparison with a second model (bias paper §4.1, Appendix B)", ""]
    b = data["against"]
    lines += [
        f"A = `{data['model']['name']}` ({data['model']['tie']}), "
        f"B = `{b['name']}` ({b['tie']}, `{b['spec']}`).",
        "",
    ]
    match = data.get("vocab_match")
    if (err := _error(match)) is not None:
        return lines + err
    if match is None:
        return lines
    lines += [
        f"Vocabularies matched by token {match['by']}: {match['matched']:,} tokens "
        f"(V_A = {match['vocab_a']:,}, V_B = {match['vocab_b']:,}).",
        "",
    ]
    blocks = [data[k] for k in ("alignment", "knn_overlap", "spectral_distance") if k in data]
    maps = next((blk["maps"] for blk in blocks if "maps" in blk), "raw")
    for label, info in (("A", data["model"]), ("B", b)):
        if info["shares_matrix"] and maps == "raw":
            lines += [
                f"{label} is tied ({info['tie']}): {label}.input and {label}.output are one matrix.",
                "",
            ]
    if "alignment" in data:
        lines += ["### Alignment (mean cosine after the map; unitless, [−1, 1])", ""]
        block = data["alignment"]
        if (err := _error(block)) is not None:
            lines += err
        else:
            mode = block.get("identity_mode", "raw")
            lines += [
                f"Maps: {block['maps']}; columns are the fitted map of the source onto the "
                f"target, in the bias paper's direction (untied onto tied, input onto output); "
                f"identity on {mode} rows (docs/metrics.md §2).",
                "",
            ]
            rows = [
                [
                    r.get("label", f"{r['source']} → {r['target']}"),
                    r["identity"],
                    r["orthogonal"],
                    r["linear"],
                ]
                for r in block["pairs"]
            ]
            lines += _table(["source → target", "identity", "orthogonal", "linear"], rows)
    if "knn_overlap" in data:
        block = data["knn_overlap"]
        lines += ["### KNN overlap (fraction of shared cosine neighbours; unitless, [0, 1])", ""]
        if (err := _error(block)) is not None:
            lines += err
        else:
            rows = [[r.get("label", f"{r['a']} – {r['b']}"), r["overlap"]] for r in block["pairs"]]
            lines += _table(["pair", f"KNN@{block['k']}"], rows)
    if "spectral_distance" in data:
        block = data["spectral_distance"]
        lines += ["### Spectral distance (unitless, ≥ 0; 0 = equal kNN graphs)", ""]
        if (err := _error(block)) is not None:
            lines += err
        else:
            lines += [
                f"kNN graphs with k = {block['k']}, omnibus embedding of "
                f"{block['n_components']} components, definition "
                f"`{block.get('definition', 'union-frobenius')}` (docs/metrics.md §2).",
                "",
            ]
            rows = [[r.get("label", f"{r['a']} – {r['b']}"), r["distance"]] for r in block["pairs"]]
            lines += _table(["pair", "distance"], rows)
    return lines


def render_markdown(data: dict[str, Any]) -> str:
    """probe.md from the probe.json dict (every block present in `data` gets a section)."""
    info = data["model"]
    lines = [f"# Probe of `{info['name']}`", "", *_model_lines(info)]
    for key, section in (
        ("consistency", _consistency),
        ("params", _params),
        ("spectra", _spectra),
        ("norm_frequency", _norm_frequency),
        ("drift", _drift),
    ):
        if key in data:
            lines += section(data)
    if "against" in data:
        lines += _comparison(data)
    if data.get("skipped"):
        lines += ["## Not computed", ""]
        lines += _table(["block", "reason"], [[k, v] for k, v in data["skipped"].items()])
    timings = data.get("timings_s", {})
    if timings:
        lines += ["## Timings (wall-clock seconds)", ""]
        lines += _table(["stage", "s"], [[k, v] for k, v in timings.items()])
    return "\n".join(lines).rstrip() + "\n"
