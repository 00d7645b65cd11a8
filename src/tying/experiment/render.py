"""report.md / report.html of an experiment from its report.json dict (figures under figures/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tying.experiment import plots
from tying.report import Column, Document, Figure, Table
from tying.report.style import coincidence_note, coincident_groups

_CONS = ("delta_ti", "cosine_distance", "procrustes_error", "principal_angle_max")


def _listing(values: list[Any]) -> str:
    """The values comma-separated, without Python's brackets: "tt, pit" for ["tt", "pit"]."""
    return ", ".join(str(v) for v in values)


def _ok(block: Any) -> bool:
    return isinstance(block, dict) and "error" not in block


def _loss_table(runs: list[dict[str, Any]]) -> Table:
    return Table(
        [
            Column("name", "run"),
            Column("steps", "steps"),
            Column("tokens", "trained", "tokens"),
            Column("final_train_loss", "final train loss", "nats/token"),
            Column("val_loss", "val loss", "nats/token"),
            Column("val_ppl", "val ppl"),
            Column("wall_time_s", "wall time", "s", 3),
            Column("tokens_per_s", "throughput", "tokens/s", 3),
        ],
        runs,
        title="Loss, perplexity and wall time (PIT Table 1)",
        note="final train loss: mean of the last logged steps (loss_window); validation at the "
        "last step.",
    )


def _seed_table(rows: list[dict[str, Any]]) -> Table:
    cols = [Column("mode", "mode")]
    if any(r.get("label") is not None for r in rows):  # reports before labels lack them
        cols.append(Column("label", "run"))
    cols += [Column("tie", "tie"), Column("seeds", "seeds")]
    for key, title in (("final_train_loss", "final train loss"), ("val_loss", "val loss")):
        cols += [
            Column(f"{key}_mean", f"{title} mean", "nats/token"),
            Column(f"{key}_min", "min"),
            Column(f"{key}_max", "max"),
        ]
    return Table(cols, rows, title="Across seeds: mean and range per interface")


def _consistency_rows(runs: list[dict[str, Any]], teacher: dict | None) -> list[dict[str, Any]]:
    rows = []
    models = ([("teacher", teacher)] if teacher else []) + [(r["name"], r["probe"]) for r in runs]
    for name, probe in models:
        cons = probe.get("consistency")
        if not _ok(cons):
            continue
        row: dict[str, Any] = {"name": name}
        for view in ("raw", "effective"):
            for key in _CONS:
                row[f"{view}.{key}"] = cons.get(view, {}).get(key)
        rows.append(row)
    return rows


def _consistency_table(rows: list[dict[str, Any]]) -> Table:
    cols = [Column("name", "model")]
    for view in ("raw", "effective"):
        cols += [
            Column(f"{view}.delta_ti", f"{view} ‖W_out E − I‖_F"),
            Column(f"{view}.cosine_distance", f"{view} cos dist"),
            Column(f"{view}.procrustes_error", f"{view} Procrustes"),
            Column(f"{view}.principal_angle_max", f"{view} max angle", "rad"),
        ]
    return Table(cols, rows, title="Interface consistency (PIT Table 2)")


def _comparison_rows(runs: list[dict[str, Any]]) -> tuple[list, list]:
    """Alignment and neighbourhood rows of every tied-vs-untied probe (repeated pairs once)."""
    align, neigh, seen = [], [], set()
    for run in runs:
        probe = run["probe"]
        if "against" not in probe:
            continue
        other = Path(probe["against"].get("spec", "")).name
        knn = {
            (p["a"], p["b"]): p["overlap"] for p in probe.get("knn_overlap", {}).get("pairs", [])
        }
        spec = {
            (p["a"], p["b"]): p["distance"]
            for p in probe.get("spectral_distance", {}).get("pairs", [])
        }
        for pair in probe.get("alignment", {}).get("pairs", []):
            key = (pair["source"], pair["target"])
            label = {"A": run["name"], "B": other}
            row = {
                "pair": f"{label[key[0][0]]}.{key[0][2:]} → {label[key[1][0]]}.{key[1][2:]}",
                "identity": pair.get("identity"),
                "orthogonal": pair.get("orthogonal"),
                "linear": pair.get("linear"),
            }
            if row["pair"] in seen:
                continue
            seen.add(row["pair"])
            align.append(row)
            neigh.append({"pair": row["pair"], "knn": knn.get(key), "spectral": spec.get(key)})
    return align, neigh


def _lens_table(records: list[dict[str, Any]], kind: str) -> Table:
    """KL per entry of one lens kind: one row per entry (emb, 1..L), one column per model.

    Entries run down the rows because their number grows with the model (31 for SmolLM2)
    while the models of a report are few: the table stays narrow, reads like the figure's
    x axis, and one entry of every model is compared along one row.
    """
    from tying.lens import entry_labels

    chosen = [r for r in records if r["kind"] == kind]
    n = max(len(r["kl"]) for r in chosen)
    cols = [Column("entry", "entry")] + [Column(f"m{i}", r["name"]) for i, r in enumerate(chosen)]
    rows = [
        {
            "entry": label,
            **{f"m{i}": r["kl"][e] if e < len(r["kl"]) else None for i, r in enumerate(chosen)},
        }
        for e, label in enumerate(entry_labels(n))
    ]
    return Table(
        cols,
        rows,
        title=f"KL(final ‖ {kind} lens) per entry (bits/token; emb = embedding output, "
        "i = output of block i)",
    )


def _lens_section(doc: Document, records: list[dict[str, Any]], figures: Path) -> None:
    """Figure and table of the lens KL per entry, one of each per lens kind."""
    from tying.lens import plot_lens_kl

    sec = doc.section("Lens KL per layer (weight-tying-bias Figure 2)")
    records = [{**r, "name": r["run"]} for r in records]
    kinds = list(dict.fromkeys(r["kind"] for r in records))
    for kind in kinds:  # one figure and one table per lens kind ("both": logit and tuned)
        name = "lens.png" if len(kinds) == 1 else f"lens_{kind}.png"
        chosen = [r for r in records if r["kind"] == kind]
        path = plot_lens_kl(chosen, figures / name, title=f"KL(final ‖ {kind} lens) per layer")
        caption = f"KL(final ‖ {kind} lens) per layer, bits/token."
        note = coincidence_note(
            coincident_groups({r["name"]: r["kl"] for r in chosen}), "bits/token"
        )
        sec.add(Figure(path, f"{caption} {note}".strip()))
        sec.add(_lens_table(records, kind))


def build_document(report: dict[str, Any], out_dir: Path) -> Document:
    """The Document of a report.json dict; writes its figures to out_dir/figures/."""
    figures = out_dir / "figures"
    runs = report["runs"]
    cfg = report["config"]
    if cfg.get("variants"):
        columns = f"variants {_listing(cfg['variants'])}"
    else:
        columns = f"ties {_listing(cfg['ties'] or sorted({r['tie'] for r in runs}))}"
    doc = Document(
        report["name"],
        [
            f"Grid: {columns} × modes {_listing(cfg['modes'])} × seeds "
            f"{_listing(cfg['seeds'])}; every run trained for the same token budget. "
            f"Numbers: `report.json`; runs: `{out_dir / 'runs'}`."
        ],
    )
    sec = doc.section("Training (PIT Table 1, Figures 3–4)")
    sec.add(_loss_table(runs))
    if len(cfg["seeds"]) > 1 and report.get("by_interface"):
        sec.add(_seed_table(report["by_interface"]))
    for mode in cfg["modes"]:
        chosen = [r for r in runs if r["mode"] == mode]
        path = plots.plot_learning_curves(
            chosen, figures / f"curves_{mode}.png", f"learning curves, {mode} mode"
        )
        sec.add(Figure(path, f"learning curves ({mode}): training loss, validation loss"))

    sec = doc.section("Interface consistency (PIT Table 2)")
    sec.add(_consistency_table(_consistency_rows(runs, report.get("teacher"))))
    sec.add(
        "Definitions in docs/metrics.md §1: raw = stored E and U; effective = s·E and "
        "U·diag(g) (final-norm gain)."
    )

    align, neigh = _comparison_rows(runs)
    if align:
        sec = doc.section("Tied vs untied matrices (weight-tying-bias Table 1, Appendix B)")
        sec.add(
            Table(
                [
                    Column("pair", "source → target"),
                    Column("identity", "identity"),
                    Column("orthogonal", "orthogonal"),
                    Column("linear", "linear"),
                ],
                align,
                title="Alignment: mean per-token cosine after the best identity / orthogonal / linear "
                "map of the source onto the target (untied onto tied, as the weight-tying-bias paper "
                "reads its rows; raw cosine for identity; docs/metrics.md §2; 1 = aligned)",
            )
        )
        sec.add(
            Table(
                [
                    Column("pair", "pair"),
                    Column("knn", "KNN overlap"),
                    Column("spectral", "spectral distance"),
                ],
                neigh,
                title="Neighbourhoods: KNN@k overlap and spectral distance",
            )
        )

    shared = [r for r in runs if r.get("grad_out_share")]
    if shared:
        sec = doc.section("Output-side gradient share (weight-tying-bias Figure 5)")
        path = plots.plot_grad_share(shared, figures / "grad_share.png")
        sec.add(Figure(path, "share of the interface gradient from the output side, first steps"))

    lens = report.get("lens")
    if lens and lens.get("records"):
        _lens_section(doc, lens["records"], figures)

    drifting = [r for r in runs if _ok(r["probe"].get("drift"))]
    if drifting:
        sec = doc.section("Drift over checkpoints (weight-tying-bias Figure 3)")
        path = plots.plot_drift_runs(drifting, figures / "drift.png")
        caption = (
            "mean per-token cosine of E and U to the first saved checkpoint (not the "
            "initialisation: the first checkpoint is at checkpoint_every steps)."
        )
        one = [r["name"] for r in drifting if r["probe"].get("model", {}).get("shares_matrix")]
        if one:
            caption += (
                f" E and U of {', '.join(one)} are one matrix: both panels show the same curve."
            )
        for label, groups in plots.drift_coincidences(drifting).items():
            note = coincidence_note(groups)
            if note:
                caption += f" Panel {label}: {note}"
        sec.add(Figure(path, caption))
    teacher = report.get("teacher")
    if teacher:
        sec = doc.section("Teacher")
        params = teacher.get("params", {})
        nf = teacher.get("norm_frequency", {})
        rows = [
            {"key": "model", "value": teacher.get("model", {}).get("name")},
            {"key": "parameters", "value": params.get("total")},
            {"key": "interface parameters", "value": params.get("embedding")},
        ]
        for label in ("E", "U"):
            if _ok(nf) and label in nf:
                rows.append(
                    {
                        "key": f"Spearman ρ(‖{label}_v‖, log freq)",
                        "value": nf[label]["spearman_rho"],
                    }
                )
        sec.add(Table([Column("key", "quantity"), Column("value", "value")], rows))
    if report.get("updates"):
        from tying.experiment.render_updates import add_updates_section

        add_updates_section(doc, report["updates"])
    if report.get("update_units"):
        from tying.experiment.render_updates import add_update_units_section

        add_update_units_section(doc, report["update_units"])
    return doc
