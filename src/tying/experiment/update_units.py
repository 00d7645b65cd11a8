"""The update experiment of docs/updates-design.md: interfaces compared at matched base loss,
one paired difference per unit of replication (`updates.units`).

Every checkpoint of every grid run is a base; the update stage (`tying.experiment.updates`)
gives it one LoRA per task, seeded with the run's seed, and measures it before and after. Here,
for each base b of run r (interface i, seed s, checkpoint step k):

    base_loss(b)  = the run's validation loss at step k (nats/token)
    gain(b)       = ref_loglik_per_token(b + LoRA, task) − ref_loglik_per_token(b, task),
                    the update's own task (nats/token; > 0 when the update did its job)
    kl(b, text)   = KL(b ‖ b + LoRA) on `text`, nats/token
    y(b, text)    = ln(kl(b, text) / gain(b))      the side effect per nat of target gain
    cross(b, t)   = the change of ref_loglik_per_token on each other evaluated task t
    lens(b)       = mean change of the logit-lens KL over the first half of the blocks
                    (residual entries 1 … L/2 of `lens_kl_change`)
    drift(b, M)   = ‖M_old(b + LoRA) − M_old(b)‖_F / ‖M_old(b)‖_F for M = E and U = W_outᵀ,
                    over the rows of the old tokens (all rows unless the base was grown by
                    `tying add-tokens`; `interface_change` of side_effects.json)

An update trained on a .jsonl task has its target in `updates.targets` (held-out completions,
`tying.update.completions`): its gain is read from target-base.json and target-updated.json
as an lm-eval task's is from results.json.

A metric m is compared at one base loss L* (the middle of the base-loss range both interfaces
cover, pooled over seeds): within each seed, each interface's run gives a least-squares line of
m on base loss through its checkpoints, both lines are read at L*
(`tying.evaluation.stats.matched_loss_comparison`), and the seed's difference is
treatment(L*) − control(L*). The seeds' differences are the units: exact two-sided sign-flip
test, 95 % t-interval; the primary metric (y on the first text) is one test, the secondary ones
one family under Holm's correction. Logarithmic metrics (y, ln kl) are differences of logs: their
exp is the treatment/control ratio, and the interval's exp is the range of ratios the run leaves.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tying.errors import InvalidInputError, MissingFileError, read_json
from tying.experiment.config import ExperimentConfig, RunSpec

#: Each secondary metric's kind: "log" (a log ratio, reported as a ratio) or "nats".
LOG, NATS = "log", "nats"


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise MissingFileError(f"{path} does not exist: run the experiment's update stage")
    return read_json(path)


def _val_loss_at(run_dir: Path, step: int) -> float:
    """The run's validation loss at `step` (metrics.jsonl)."""
    path = run_dir / "metrics.jsonl"
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("step") == step and row.get("val_loss") is not None:
            return float(row["val_loss"])
    raise InvalidInputError(
        f"{path} has no validation loss at step {step}: set train.eval_every to divide "
        "checkpoint_every so that every checkpoint has one"
    )


def _log_ratio(numerator: float, denominator: float) -> float:
    """ln(numerator / denominator), NaN where either is ≤ 0 (no ratio exists)."""
    if numerator > 0 and denominator > 0:
        return math.log(numerator) - math.log(denominator)
    return math.nan


def base_record(
    base_results: dict[str, Any],
    updated_results: dict[str, Any],
    side_effects: dict[str, Any],
    task: str,
) -> dict[str, Any]:
    """One base's measurements (see the module docstring) from its three files.

    Args:
        base_results, updated_results: results.json of the base and of base + the `task`
            LoRA, with reference log-likelihoods.
        side_effects: side_effects.json of the LoRA.
        task: the update's own task.

    Returns:
        {"gain", "drift": {"E", "U"}, "cross": {task: change}, "kl": {text: kl}, "kl_per_window": {text: [...]},
        "y": {text: ln(kl / gain)}, "lens_first_half", "items": {task: [per-item change of
        log p(reference) per token]}}.
    """
    from tying.experiment.updates import item_changes

    pair = {"base": base_results, "updated": updated_results}
    changes, items = {}, {}
    for name, before in base_results["tasks"].items():
        after = updated_results["tasks"][name]
        changes[name] = after["ref_loglik_per_token"] - before["ref_loglik_per_token"]
        items[name] = [round(change, 6) for change in item_changes(pair, name)]
    gain = changes[task]
    texts = side_effects["texts"]
    kl = {text: float(entry["kl_nats"]) for text, entry in texts.items()}
    lens = side_effects.get("lens_kl_change")
    half = (len(lens) - 1) // 2 if lens else 0
    change = side_effects.get("interface_change") or {}
    return {
        "gain": gain,
        "drift": {m: change.get(f"{m}_old_rel_change") for m in ("E", "U")},
        "cross": {name: change for name, change in changes.items() if name != task},
        "kl": kl,
        "kl_per_window": {t: list(e["per_window"]["kl_nats"]) for t, e in texts.items()},
        "y": {text: _log_ratio(value, gain) for text, value in kl.items()},
        "lens_first_half": sum(lens[1 : half + 1]) / half if half else None,
        "items": items,
    }


def metric_values(record: dict[str, Any]) -> dict[str, float]:
    """The compared metrics of one base, by name: `y:TEXT`, `ln_kl:TEXT`, `cross:TASK`,
    `drift:E_old`, `drift:U_old`, `lens_first_half` (NaN where undefined)."""
    values = {f"y:{t}": v for t, v in record["y"].items()}
    values.update({f"ln_kl:{t}": _log_ratio(v, 1.0) for t, v in record["kl"].items()})
    values.update({f"cross:{t}": v for t, v in record["cross"].items()})
    for matrix, value in record.get("drift", {}).items():
        values[f"drift:{matrix}_old"] = math.nan if value is None else value
    lens = record["lens_first_half"]
    values["lens_first_half"] = math.nan if lens is None else lens
    return values


def matched_loss_point(records: Sequence[dict[str, Any]], control: str, treatment: str) -> float:
    """L*: the middle of the base-loss range both interfaces cover, pooled over seeds.

    Raises:
        ValueError: the two interfaces' base losses do not overlap.
    """
    ranges = []
    for label in (control, treatment):
        losses = [r["base_loss"] for r in records if r["label"] == label]
        if not losses:
            raise InvalidInputError(f"no base of interface {label!r}")
        ranges.append((min(losses), max(losses)))
    low, high = max(ranges[0][0], ranges[1][0]), min(ranges[0][1], ranges[1][1])
    if low > high:
        raise InvalidInputError(
            f"the base losses of {control} ({ranges[0][0]:.3f}-{ranges[0][1]:.3f}) and "
            f"{treatment} ({ranges[1][0]:.3f}-{ranges[1][1]:.3f}) do not overlap: no matched "
            "loss; checkpoint the runs earlier or train them longer"
        )
    return 0.5 * (low + high)


def unit_differences(
    records: Sequence[dict[str, Any]],
    metric: str,
    control: str,
    treatment: str,
    at_loss: float,
) -> list[dict[str, Any]]:
    """Per seed, treatment − control of `metric` read at `at_loss` on each run's own line.

    Returns:
        [{"base_seed", "lora_seed", "control", "treatment", "difference", "extrapolated"}] in
        seed order; a seed where either run has fewer than two finite points is left out.
        `extrapolated`: `at_loss` lies outside that run's own base losses for either run.
    """
    from tying.evaluation.stats import matched_loss_comparison

    by_seed: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for r in records:
        if r["label"] in (control, treatment):
            by_seed.setdefault(r["base_seed"], {}).setdefault(r["label"], []).append(r)
    units = []
    for seed in sorted(by_seed):
        points = {}
        for label in (control, treatment):
            rows = [r for r in by_seed[seed].get(label, []) if math.isfinite(r["metrics"][metric])]
            points[label] = (
                [r["base_loss"] for r in rows],
                [r["metrics"][metric] for r in rows],
            )
        if any(len(points[label][0]) < 2 for label in points):
            continue
        cmp = matched_loss_comparison(*points[control], *points[treatment], at_loss=at_loss)
        outside = any(
            not min(points[label][0]) <= at_loss <= max(points[label][0]) for label in points
        )
        lora_seeds = {r["lora_seed"] for rows in by_seed[seed].values() for r in rows}
        units.append(
            {
                "base_seed": seed,
                "lora_seed": lora_seeds.pop() if len(lora_seeds) == 1 else sorted(lora_seeds),
                "control": cmp.effect_a,
                "treatment": cmp.effect_b,
                "difference": cmp.difference,
                "extrapolated": outside,
            }
        )
    return units


def _summary(units: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    from tying.evaluation.stats import paired_unit_summary

    out = paired_unit_summary([u["difference"] for u in units])
    out["kind"] = kind
    out["units"] = units
    if len(units) >= 2:  # spread across units, per interface: descriptive, not tested
        for side in ("control", "treatment"):
            out[f"{side}_sd"] = statistics.stdev(u[side] for u in units)
    out["extrapolated_units"] = sum(u["extrapolated"] for u in units)
    if kind == LOG and "mean" in out:
        out["ratio"] = math.exp(out["mean"])
        if "ci95" in out:
            out["ratio_ci95"] = [math.exp(v) for v in out["ci95"]]
    return out


def compare_units(
    records: Sequence[dict[str, Any]],
    control: str,
    treatment: str,
    primary: str,
    secondary: Sequence[str],
    smallest_ratio: float = 1.5,
    reported: Sequence[str] = (),
) -> dict[str, Any]:
    """The pre-declared comparison of docs/updates-design.md.

    Args:
        records: one per base: {"label", "base_seed", "lora_seed", "base_loss", "metrics":
            `metric_values`}.
        control, treatment: the two interfaces' labels (e.g. tt, pit).
        primary: the primary metric's name (a log metric, `y:TEXT`).
        secondary: the secondary family's metric names (Holm-corrected together).
        smallest_ratio: the smallest treatment/control ratio of the primary metric worth
            detecting; the verdict says whether the interval excludes it.
        reported: metrics summarised outside the family (no Holm correction), as declared.

    Returns:
        {"control", "treatment", "at_loss", "primary": summary, "secondary": {name: summary
        with "p_holm"}}; a summary is `paired_unit_summary` of the per-seed differences plus
        "kind", "units", "extrapolated_units", the spread across units of each interface's
        value ("control_sd", "treatment_sd": descriptive, the paper's "predictability", not
        tested) and, for log metrics, "ratio" and "ratio_ci95"; the primary also has "verdict";
        "reported": {name: summary} of `reported`.
    """
    at_loss = matched_loss_point(records, control, treatment)

    def kind(name: str) -> str:
        return LOG if name.startswith(("y:", "ln_kl:")) else NATS

    def summary(name: str) -> dict[str, Any]:
        return _summary(unit_differences(records, name, control, treatment, at_loss), kind(name))

    first = summary(primary)
    first["verdict"] = ratio_verdict(first, smallest_ratio)
    family = {name: summary(name) for name in secondary}
    tested = [n for n, s in family.items() if "sign_flip" in s]
    from tying.evaluation.stats import holm

    for name, adjusted in zip(tested, holm([family[n]["sign_flip"]["p"] for n in tested])):
        family[name]["p_holm"] = adjusted
    return {
        "control": control,
        "treatment": treatment,
        "at_loss": at_loss,
        "primary_metric": primary,
        "smallest_ratio": smallest_ratio,
        "primary": first,
        "secondary": family,
        "reported": {name: summary(name) for name in reported},
    }


def ratio_verdict(summary: dict[str, Any], smallest_ratio: float, alpha: float = 0.05) -> str:
    """What the primary comparison decides, in words: a significant direction (p ≤ alpha), or
    "undecided" with the ratios its 95 % interval excludes."""
    if "ratio_ci95" not in summary:
        return f"undecided: {summary['n']} unit(s), no interval"
    low, high = summary["ratio_ci95"]
    p = summary["sign_flip"]["p"]
    if p <= alpha:
        side = "smaller" if summary["mean"] < 0 else "larger"
        return (
            f"treatment {side} (ratio {summary['ratio']:.2f}, 95% {low:.2f}-{high:.2f}, p {p:.3g})"
        )
    head = f"undecided (p {p:.3g}): ratios outside {low:.2f}-{high:.2f} excluded"
    if low > 1 / smallest_ratio and high < smallest_ratio:
        return f"{head}, so effects beyond {smallest_ratio:g}x either way are excluded"
    return f"{head}; a {smallest_ratio:g}x effect is not excluded"


def base_records(
    cfg: ExperimentConfig, name: str, run: RunSpec, step: int, lora_seed: int
) -> list[dict[str, Any]]:
    """The records of one base (`name`: grid run `run` at checkpoint `step`), one per update
    task: its run, seed, step, base loss, the measurements of `base_record` and
    `metric_values`.

    Raises:
        FileNotFoundError: a step's output is missing (run the stage first).
    """
    from tying.experiment.updates import (
        FINETUNE_FILE,
        RESULTS_FILE,
        SIDE_EFFECTS_FILE,
        base_eval_folder,
        target_files,
        task_label,
        update_folders,
    )

    base_results = _read_json(base_eval_folder(cfg, name) / RESULTS_FILE)
    records = []
    for task in cfg.updates.tasks:
        f = update_folders(cfg, name, task)
        finetune = _read_json(f.adapter / FINETUNE_FILE)
        before, after = base_results, _read_json(f.eval / RESULTS_FILE)
        if task in cfg.updates.targets:  # the target of a .jsonl update: its own file
            files = target_files(cfg, name, task)
            label = task_label(task)
            before = {**before, "tasks": {**before["tasks"], label: _read_json(files[0])}}
            after = {**after, "tasks": {**after["tasks"], label: _read_json(files[1])}}
        record = base_record(
            before, after, _read_json(f.side_effects / SIDE_EFFECTS_FILE), task_label(task)
        )
        records.append(
            {
                "base": name,
                "run": run.name,
                "label": run.label,
                "tie": run.tie,
                "base_seed": run.seed,
                "lora_seed": lora_seed,
                "step": step,
                "task": task_label(task),
                "base_loss": _val_loss_at(cfg.run_dir(run), step),
                "lora_final_loss": finetune.get("final_loss"),
                **record,
                "metrics": metric_values(record),
            }
        )
    return records


def collect_units(cfg: ExperimentConfig) -> list[dict[str, Any]]:
    """One record per base of the stage and update task (`base_records`).

    Raises:
        FileNotFoundError: a step's output is missing (run the stage first).
    """
    from tying.experiment.updates import update_bases

    records = []
    for base in update_bases(cfg):
        assert base.run is not None and base.step is not None  # units only
        records += base_records(cfg, base.name, base.run, base.step, base.lora_seed)
    return records


def analyze_units(cfg: ExperimentConfig) -> dict[str, Any]:
    """The report's `update_units` block: every base's record and, per update task and
    `updates.compare` pair, `compare_units` with the primary metric y on the first side-effect
    text and the secondary family of docs/updates-design.md (y and ln kl on the other texts,
    ln kl on the first, the cross-task changes, the lens change). A pair whose base losses do not
    overlap gets `error` (the reason) instead of statistics."""
    records = collect_units(cfg)
    comparisons = []
    for task in dict.fromkeys(r["task"] for r in records):
        rows = [r for r in records if r["task"] == task]
        names = list(rows[0]["metrics"])
        texts = list(rows[0]["kl"])
        primary = f"y:{texts[0]}"
        outside = [n for n in names if n in cfg.updates.outside_family]
        secondary = [n for n in names if n != primary and n not in outside]
        for control, treatment in cfg.updates.compare:
            entry: dict[str, Any] = {"task": task, "control": control, "treatment": treatment}
            try:
                entry.update(
                    compare_units(rows, control, treatment, primary, secondary, reported=outside)
                )
            except ValueError as e:  # no matched loss: said in the report, not a crash
                entry["error"] = str(e)
            comparisons.append(entry)
    return {"bases": records, "comparisons": comparisons}
