"""The update experiment's likelihoods on the FULL test sets, against its seeded
subsets (docs/results.md §14, issue 26 item 1).

`configs/experiments/update_units.yaml` measures every base and base + LoRA on 120 seeded items
of GSM8K, SVAMP and HumanEval (the full sets cost about 25 minutes a base on this CPU). This
script evaluates the same models, with the same options but `limit: null`, on all 1,319 / 1,000
/ 164 items, base by base (a finished evaluation is kept and skipped, so runs resume and several
processes can share the work by seed), and compares what the subsets gave with what the full
sets give:

- per base: the target gain (GSM8K reference log-likelihood change, nats/token), the cross-task
  changes and y = ln(KL WikiText-2 / gain), subset and full; the subset gain's item-sampling
  standard error (a ratio estimator over the subset's items, tokens as weights, with the finite
  population correction) and whether the full-set gain lies within 1.96 of them;
- over the seeds whose four bases are all done: the experiment's own comparison
  (`tying.experiment.update_units.compare_units`: primary y at matched loss, the secondary
  family under Holm), once with the subsets' values and once with the full sets', the same
  seeds, bases, adapters and side-effect KLs (only the test-set likelihoods differ);
- MBPP (`evaluate --tasks mbpp`, all 500 items, into OUT/BASE/base-mbpp and
  updated-gsm8k-mbpp): its cross-task change joins each full-set record, and is compared the
  same way outside the pre-declared family ("full_extra_tasks": its own exact sign-flip p, and
  its Holm p in the family widened by it).

    OMP_NUM_THREADS=1 python -m studies.update_units_full_sets evaluate --seeds 0 2 4 6 &
    OMP_NUM_THREADS=1 python -m studies.update_units_full_sets evaluate --seeds 1 3 5 7 &
    OMP_NUM_THREADS=1 python -m studies.update_units_full_sets evaluate --tasks mbpp --seeds 0 2 4 6 &
    OMP_NUM_THREADS=1 python -m studies.update_units_full_sets evaluate --tasks mbpp --seeds 1 3 5 7 &
    python -m studies.update_units_full_sets compare --json docs/results/update_units_full_sets.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "experiments" / "update_units.yaml"
DEFAULT_OUT = ROOT / "runs" / "update-units-full-sets"
log = logging.getLogger("update_units_full_sets")

#: Tasks evaluated on their full sets after the experiment's own (`--tasks mbpp`): MBPP, left
#: out of the experiment for its cost, joins the cross-task changes where both of a base's
#: evaluations are done; it is reported outside the pre-declared secondary family.
EXTRA_TASKS = ["mbpp"]


def _bases(cfg: Any, seeds: list[int] | None) -> list[Any]:
    from tying.experiment.updates import update_bases

    bases = update_bases(cfg)
    return [b for b in bases if seeds is None or b.run.seed in seeds]


def evaluation_folder(out: Path, base: str, label: str, tasks: list[str] | None) -> Path:
    """Where base `base`'s evaluation `label` ("base", "updated-gsm8k") on the full sets of
    `tasks` lies: OUT/BASE/LABEL for the experiment's own tasks (None), OUT/BASE/LABEL-T1-T2
    for others (MBPP: "base-mbpp")."""
    return out / base / (label if tasks is None else "-".join([label, *tasks]))


def evaluate(cfg: Any, seeds: list[int], out: Path, tasks: list[str] | None = None) -> None:
    """Every base of `seeds` and base + its LoRA on the full sets of `tasks` (None: the
    experiment's `eval_tasks`); finished evaluations are skipped."""
    from tying.evaluation.evaluate import evaluate_model
    from tying.experiment.updates import RESULTS_FILE, evaluate_options, update_folders

    for b in _bases(cfg, seeds):
        for task in cfg.updates.tasks:
            adapter = update_folders(cfg, b.name, task).adapter
            for label, with_adapter in (("base", None), (f"updated-{task}", adapter)):
                folder = evaluation_folder(out, b.name, label, tasks)
                if (folder / RESULTS_FILE).is_file():
                    log.info("%s %s: done, skipped", b.name, folder.name)
                    continue
                log.info("%s %s: evaluating on the full sets", b.name, folder.name)
                options = evaluate_options(cfg, b.spec, with_adapter, folder)
                options = dataclasses.replace(options, limit=None)  # every item
                if tasks is not None:
                    options = dataclasses.replace(options, tasks=list(tasks))
                evaluate_model(options)


def gain_standard_error(pair: dict[str, Any], task: str, population: int) -> float:
    """Item-sampling standard error of a subset's change of reference log-likelihood per token.

    The change is a ratio estimator, sum_i Δℓ_i / sum_i t_i over the n subset items (Δℓ_i the
    change of item i's summed log-likelihood, t_i its reference tokens): its variance is
    n / (n − 1) · Σ (Δℓ_i − r·t_i)² / (Σ t_i)², times the finite-population correction
    1 − n / N for a subset drawn without replacement from the N items of the full set.
    """
    before = pair["base"]["tasks"][task]["items"]
    after = pair["updated"]["tasks"][task]["items"]
    deltas = [a["ref_loglik"] - b["ref_loglik"] for b, a in zip(before, after, strict=True)]
    tokens = [b["ref_tokens"] for b in before]
    n, total = len(deltas), sum(tokens)
    ratio = sum(deltas) / total
    resid = sum((d - ratio * t) ** 2 for d, t in zip(deltas, tokens, strict=True))
    variance = n / (n - 1) * resid / total**2 * max(0.0, 1.0 - n / population)
    return math.sqrt(variance)


def compare(cfg: Any, out: Path) -> dict[str, Any]:
    """Subset against full sets for every base whose full evaluations are done."""
    from tying.experiment.update_units import (
        base_record,
        collect_units,
        compare_units,
        metric_values,
    )
    from tying.experiment.updates import (
        RESULTS_FILE,
        SIDE_EFFECTS_FILE,
        base_eval_folder,
        task_label,
        update_folders,
    )

    subset_records = {r["base"]: r for r in collect_units(cfg)}
    units_json = json.loads((ROOT / "docs" / "results" / "update_units.json").read_text())
    comparison = units_json["update_units"]["comparisons"][0]
    primary = comparison["primary_metric"]
    control, treatment = comparison["control"], comparison["treatment"]
    task = cfg.updates.tasks[0]
    label = task_label(task)
    rows, full_records = [], []
    for b in _bases(cfg, None):
        base_file = out / b.name / "base" / RESULTS_FILE
        updated_file = out / b.name / f"updated-{task}" / RESULTS_FILE
        if not (base_file.is_file() and updated_file.is_file()):
            continue
        f = update_folders(cfg, b.name, task)
        side_effects = json.loads((f.side_effects / SIDE_EFFECTS_FILE).read_text())
        full_pair = {
            "base": json.loads(base_file.read_text()),
            "updated": json.loads(updated_file.read_text()),
        }
        extra_files = {
            key: evaluation_folder(out, b.name, name, EXTRA_TASKS) / RESULTS_FILE
            for key, name in (("base", "base"), ("updated", f"updated-{task}"))
        }
        if all(path.is_file() for path in extra_files.values()):  # MBPP joins the cross changes
            for key, path in extra_files.items():
                full_pair[key]["tasks"].update(json.loads(path.read_text())["tasks"])
        sub_pair = {
            "base": json.loads((base_eval_folder(cfg, b.name) / RESULTS_FILE).read_text()),
            "updated": json.loads((f.eval / RESULTS_FILE).read_text()),
        }
        full = base_record(full_pair["base"], full_pair["updated"], side_effects, label)
        sub = subset_records[b.name]
        population = full_pair["base"]["tasks"][label]["n"]
        se = gain_standard_error(sub_pair, label, population)
        rows.append(
            {
                "base": b.name,
                "tie": b.run.tie,
                "base_seed": b.run.seed,
                "step": b.step,
                "items": {t: e["n"] for t, e in full_pair["base"]["tasks"].items()},
                "subset_items": {t: e["n"] for t, e in sub_pair["base"]["tasks"].items()},
                "gain_subset": sub["gain"],
                "gain_full": full["gain"],
                "gain_subset_se": se,
                "gain_full_within_1_96_se": abs(full["gain"] - sub["gain"]) <= 1.96 * se,
                "cross_subset": sub["cross"],
                "cross_full": full["cross"],
                "y_subset": sub["y"],
                "y_full": full["y"],
            }
        )
        full_records.append({**sub, **full, "metrics": metric_values(full)})
    seeds_done = sorted(
        s for s in {r["base_seed"] for r in rows} if sum(r["base_seed"] == s for r in rows) == 4
    )
    secondary = list(comparison["secondary"])

    def on_seeds_done(
        records: list[dict[str, Any]], family: list[str] = secondary
    ) -> dict[str, Any] | None:
        chosen = [r for r in records if r["base_seed"] in seeds_done]
        if len(seeds_done) < 2 or not all(n in r["metrics"] for r in chosen for n in family):
            return None
        return compare_units(chosen, control, treatment, primary, family)

    subset_cmp = on_seeds_done(list(subset_records.values()))
    full_cmp = on_seeds_done(full_records)
    extra_cmp = {}
    for extra_task in EXTRA_TASKS:
        name = f"cross:{task_label(extra_task)}"
        # Outside the pre-declared family: its own exact sign-flip p, and its Holm p had it
        # been a seventh member of the family.
        widened = on_seeds_done(full_records, [*secondary, name])
        if widened is None:
            continue
        extra_cmp[name] = {
            **widened["secondary"][name],
            "p_holm_in_family_of": len(secondary) + 1,
        }
    gaps = [abs(r["gain_full"] - r["gain_subset"]) for r in rows]
    return {
        "benchmark": "update units: full test sets against the 120-item subsets",
        "config": str(CONFIG.relative_to(ROOT)),
        "task": label,
        "primary_metric": primary,
        "bases_done": len(rows),
        "seeds_done": seeds_done,
        "max_abs_gain_gap": max(gaps) if gaps else None,
        "share_within_1_96_se": (
            sum(r["gain_full_within_1_96_se"] for r in rows) / len(rows) if rows else None
        ),
        "subset": subset_cmp,
        "full": full_cmp,
        "full_extra_tasks": extra_cmp,
        "bases": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["evaluate", "compare"])
    parser.add_argument("--config", default=str(CONFIG))
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="the full-set evaluations")
    parser.add_argument("--seeds", type=int, nargs="+", help="evaluate these seeds' bases")
    parser.add_argument(
        "--tasks", nargs="+", help="evaluate on these tasks (default: the experiment's eval_tasks)"
    )
    parser.add_argument("--json", help="compare: write the comparison here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from tying.experiment.config import load_experiment

    cfg = load_experiment(args.config)
    out = Path(args.out)
    if args.mode == "evaluate":
        if not args.seeds:
            parser.error("evaluate needs --seeds")
        evaluate(cfg, args.seeds, out, args.tasks)
        return
    result = compare(cfg, out)
    text = json.dumps(result, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text if not args.json else f"wrote {args.json}", file=sys.stdout)


if __name__ == "__main__":
    main()
