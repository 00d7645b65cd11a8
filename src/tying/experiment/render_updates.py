"""The update-stage sections of an experiment report: `report["updates"]` (see
`tying.experiment.updates`: accuracies, what each update changed, the paired TT-vs-PIT
comparisons) and `report["update_units"]` (`tying.experiment.update_units`: the comparison at
matched base loss over seeds)."""

from __future__ import annotations

from typing import Any

from tying.report import Column, Document, Table, format_value


def _interval(ci: list[float] | None, digits: int = 3) -> str | None:
    if not ci or ci[0] is None:
        return None
    return f"[{format_value(ci[0], digits)}, {format_value(ci[1], digits)}]"


def _accuracy_table(updates: dict[str, Any]) -> Table:
    rows = []
    for base, entry in updates["bases"].items():
        rows.append({"model": base, **_task_cells(entry["eval"], updates["eval_tasks"])})
    for adapter in updates["adapters"]:
        name = f"{adapter['base']} + {adapter['task']} LoRA"
        rows.append({"model": name, **_task_cells(adapter["eval"], updates["eval_tasks"])})
    cols = [Column("model", "model")]
    for task in updates["eval_tasks"]:
        cols += [
            Column(f"{task}.acc", f"{task} accuracy"),
            Column(f"{task}.ci", "95% CI (Wilson)"),
            Column(f"{task}.ll", f"{task} ref. log-lik.", "nats/token"),
        ]
    return Table(
        cols,
        rows,
        title="Exact match and reference log-likelihood (PIT paper §5.6), "
        f"{updates['limit'] or 'all'} seeded items per task, the same items for every model",
        note="accuracy: exact final number (GSM8K, SVAMP) or pass@1 in the sandbox (MBPP, "
        "HumanEval); log-likelihood: mean over items of log p(reference) / tokens.",
    )


def _task_cells(evals: dict[str, Any], tasks: list[str]) -> dict[str, Any]:
    cells: dict[str, Any] = {}
    for task in tasks:
        entry = evals.get(task) or {}
        cells[f"{task}.acc"] = entry.get("accuracy")
        cells[f"{task}.ci"] = _interval(entry.get("ci95"))
        cells[f"{task}.ll"] = entry.get("ref_loglik_per_token")
    return cells


def _change_table(updates: dict[str, Any]) -> Table:
    rows = []
    for adapter in updates["adapters"]:
        for task, change in adapter["change"].items():
            boot = change.get("ref_loglik_bootstrap") or {}
            rows.append(
                {
                    "update": f"{adapter['base']} + {adapter['task']}",
                    "task": task + (" (target)" if task == adapter["task"] else ""),
                    "dacc": change["delta_accuracy"],
                    "mcnemar": change["mcnemar"]["p_value"],
                    "dll": change.get("delta_ref_loglik_per_token"),
                    "dll_ci": _interval(boot.get("ci95")),
                    "dll_p": boot.get("p_value"),
                }
            )
    return Table(
        [
            Column("update", "update"),
            Column("task", "evaluated on"),
            Column("dacc", "Δ accuracy"),
            Column("mcnemar", "McNemar p"),
            Column("dll", "Δ ref. log-lik.", "nats/token"),
            Column("dll_ci", "95% CI (paired bootstrap)"),
            Column("dll_p", "p"),
        ],
        rows,
        title="What each update changed on its target and on the other tasks (updated − base)",
    )


def _side_effect_table(updates: dict[str, Any]) -> Table | None:
    rows = []
    for adapter in updates["adapters"]:
        side = adapter.get("side_effects")
        if not side:
            continue
        for text, entry in side["texts"].items():
            rows.append(
                {
                    "update": f"{adapter['base']} + {adapter['task']}",
                    "text": text,
                    "kl": entry["kl_nats"],
                    "kl_ci": _interval(entry.get("kl_nats_ci95"), 3),
                    "dloss": entry["delta_loss"],
                    "top1": entry["top1_agreement"],
                    "tokens": entry["tokens"],
                }
            )
    if not rows:
        return None
    return Table(
        [
            Column("update", "update"),
            Column("text", "text"),
            Column("kl", "KL(base ‖ updated)", "nats/token"),
            Column("kl_ci", "95% CI (bootstrap over windows)"),
            Column("dloss", "Δ loss", "nats/token"),
            Column("top1", "top-1 agreement"),
            Column("tokens", "tokens"),
        ],
        rows,
        title="Side effects on unrelated text (docs/metrics.md §5)",
    )


def _comparison_table(updates: dict[str, Any]) -> Table | None:
    rows = []
    for comp in updates["comparisons"]:
        label = f"{comp['treatment']} vs {comp['control']}, {comp['task']} LoRA"
        for task, entry in comp["updated"].items():
            gain = comp["gain"].get(task, {})
            rows.append(
                {
                    "comparison": label,
                    "on": task,
                    "dacc": entry["delta_accuracy"],
                    "p_acc": entry["mcnemar"]["p_value"],
                    "gain": gain.get("difference"),
                    "gain_ci": _interval(gain.get("ci95")),
                    "gain_p": gain.get("p_value"),
                }
            )
        for text, entry in comp["side_effects"].items():
            rows.append(
                {
                    "comparison": label,
                    "on": f"{text} (side-effect KL)",
                    "kl_diff": entry["difference"],
                    "kl_ci": _interval(entry["ci95"]),
                    "kl_p": entry["p_value"],
                    "kl_ratio": entry["ratio"],
                }
            )
    if not rows:
        return None
    return Table(
        [
            Column("comparison", "treatment vs control"),
            Column("on", "measured on"),
            Column("dacc", "Δ accuracy after update"),
            Column("p_acc", "McNemar p"),
            Column("gain", "Δ log-lik. gain", "nats/token"),
            Column("gain_ci", "95% CI"),
            Column("gain_p", "p"),
            Column("kl_diff", "Δ side-effect KL", "nats/token"),
            Column("kl_ci", "95% CI"),
            Column("kl_p", "p"),
            Column("kl_ratio", "KL ratio"),
        ],
        rows,
        title="The same update on two bases, paired (treatment − control)",
        note="Δ accuracy: updated treatment − updated control on the same items (exact "
        "McNemar); log-lik. gain: (treatment's change by the update) − (control's), paired "
        "bootstrap over items; side-effect KL: treatment's − control's, paired bootstrap over "
        "the same windows; KL ratio = treatment / control.",
    )


def add_updates_section(doc: Document, updates: dict[str, Any]) -> None:
    """Append the update stage's tables to `doc`."""
    sec = doc.section("Updates: LoRA, evaluation and side effects (PIT paper §5.6)")
    sec.add(
        "Adapters: "
        + "; ".join(
            f"{a['base']} + {a['task']}: {a['steps']} steps, final loss "
            f"{format_value(a['final_loss'])} nats/token"
            for a in updates["adapters"]
        )
        + "."
    )
    sec.add(_accuracy_table(updates))
    sec.add(_change_table(updates))
    for table in (_side_effect_table(updates), _comparison_table(updates)):
        if table is not None:
            sec.add(table)


def _unit_row(name: str, summary: dict[str, Any], role: str) -> dict[str, Any]:
    sign = summary.get("sign_flip") or {}
    log = summary.get("kind") == "log"
    return {
        "metric": name,
        "role": role,
        "n": summary["n"],
        "mean": summary.get("mean"),
        "ci": _interval(summary.get("ci95")),
        "ratio": summary.get("ratio") if log else None,
        "ratio_ci": _interval(summary.get("ratio_ci95")) if log else None,
        "p": sign.get("p"),
        "p_holm": summary.get("p_holm"),
        "extrapolated": summary.get("extrapolated_units"),
    }


def add_update_units_section(doc: Document, units: dict[str, Any]) -> None:
    """Append the matched-loss comparison of the update units (one table per task and pair)."""
    sec = doc.section("Update units: interfaces compared at matched base loss (updates-design)")
    sec.add(f"{len(units['bases'])} bases (checkpoints of every run, one LoRA each).")
    for comparison in units["comparisons"]:
        pair = f"{comparison['treatment']} − {comparison['control']}, {comparison['task']} LoRA"
        if "error" in comparison:
            sec.add(f"{pair}: no comparison ({comparison['error']}).")
            continue
        rows = [_unit_row(comparison["primary_metric"], comparison["primary"], "primary")]
        rows += [_unit_row(n, s, "secondary") for n, s in comparison["secondary"].items()]
        sec.add(
            Table(
                [
                    Column("metric", "metric"),
                    Column("role", "role"),
                    Column("n", "units (seeds)"),
                    Column("mean", "mean difference"),
                    Column("ci", "95% t-interval"),
                    Column("ratio", "ratio"),
                    Column("ratio_ci", "ratio 95%"),
                    Column("p", "sign-flip p (exact)"),
                    Column("p_holm", "Holm p"),
                    Column("extrapolated", "units read outside a run's losses"),
                ],
                rows,
                title=f"{pair}, at base loss {format_value(comparison['at_loss'])} nats/token",
                note="Per seed, each run's line of the metric on its checkpoints' base loss, read "
                "at the matched loss; difference = treatment − control. y = ln(KL(base ‖ "
                "updated) / target gain); ln_kl: ln KL; cross: change of the reference "
                "log-likelihood on another task (nats/token); ratio = exp(mean) for log "
                "metrics. Verdict: " + comparison["primary"]["verdict"] + ".",
            )
        )
