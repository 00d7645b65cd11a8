"""The PIT paper's teacher-mode claim (Table 1, Teacher rows: PIT's loss at TT's level) on the two
near-isotropic teachers, over seeds: TT vs PIT continued pretraining from each teacher
(configs/experiments/teacher_isotropic_decoder.yaml and teacher_isotropic_gpt2.yaml).

Per teacher and seed: the final validation loss of the TT and the PIT run (the last `val_loss`
row of metrics.jsonl, at the last step), PIT's step-0 KL(teacher || converted) (conversion.json),
and the paired difference PIT − TT (the same seed: the same data order). The seed is the unit.
Per teacher: the mean difference, its 95% t-interval (scipy), the exact two-sided sign-flip test
(`tying.evaluation.stats.sign_flip_test`; with n seeds its smallest p is 2 / 2^n: 0.25 at n = 3,
so at n = 3 it can never reject at 0.05), and Holm's adjustment over the teachers. Verdict, against
the paper's own range of teacher-mode differences (PIT − TT of Table 1's three teacher rows):
"reproduced" if the interval lies inside that range, "contradicted" if it lies entirely outside it,
otherwise "undecided" with the largest |effect| the interval leaves.

    python -m studies.teacher_seeds [--decoder FOLDER ...] [--gpt2 FOLDER ...] \
        [--smollm2 FOLDER ...] [--out docs/results/teacher_seeds.json]    # defaults: TEACHERS
    python -m studies.teacher_seeds --markdown    # the tables of docs/results.md §13

Only seeds whose TT and PIT runs both finished (DONE.json) are paired; the others are listed as
missing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tying.train.metrics import read_metrics

#: The PIT paper's Table 1, Teacher rows: final training loss (TT, PIT) per model.
PAPER_TABLE1 = {
    "GPT-256M": {"tt": 2.311, "pit": 2.304},
    "GPT-590M": {"tt": 3.523, "pit": 3.714},
    "GPT-1.3B": {"tt": 3.025, "pit": 2.821},
}
#: Experiment folders per teacher. The decoder's TT and PIT runs of update_units.yaml (8 seeds,
#: the bases of docs/results.md §14) have the recipe of teacher_isotropic_decoder.yaml (3 seeds
#: and the pit-z ablation) and only more checkpoints: a seed is read from the first folder that
#: has it, and a seed finished in both must have the same final loss (checked).
TEACHERS = {
    "decoder": ["runs/experiment-update-units", "runs/experiment-teacher-isotropic-decoder"],
    "gpt2": ["runs/experiment-teacher-isotropic-gpt2"],
    "smollm2": ["runs/experiment-teacher-smollm2-seeds"],
}
CONFIGS = {
    "decoder": [
        "configs/experiments/update_units.yaml",
        "configs/experiments/teacher_isotropic_decoder.yaml",
    ],
    "gpt2": ["configs/experiments/teacher_isotropic_gpt2.yaml"],
    "smollm2": ["configs/experiments/teacher_smollm2_seeds.yaml"],
}
#: Training-loss rows averaged for the secondary (training-loss) comparison.
TRAIN_WINDOW = 10


def paper_range() -> tuple[float, float]:
    """(smallest, largest) PIT − TT of Table 1's teacher rows, rounded to the table's 3 decimals."""
    diffs = [round(r["pit"] - r["tt"], 3) for r in PAPER_TABLE1.values()]
    return min(diffs), max(diffs)


def read_run(run: Path) -> dict[str, Any] | None:
    """Final validation loss, last-window training loss, step-0 conversion and time of a finished
    run; None when it has not finished (no DONE.json)."""
    done = run / "DONE.json"
    if not done.is_file():
        return None
    rows = read_metrics(run)
    val = [r for r in rows if r.get("val_loss") is not None]
    train = [r for r in rows if "loss" in r]
    last = max(r["step"] for r in train)
    finals = [r for r in val if r["step"] == last]
    if not finals:
        raise ValueError(f"{run}: no validation loss at the last step {last}")
    out: dict[str, Any] = {
        "steps": last,
        "val_loss": float(finals[-1]["val_loss"]),
        "val_loss_by_step": {str(r["step"]): float(r["val_loss"]) for r in val},
        "train_loss_last": sum(r["loss"] for r in train[-TRAIN_WINDOW:])
        / len(train[-TRAIN_WINDOW:]),
        "elapsed_s": json.loads(done.read_text())["result"]["elapsed_s"],
    }
    conversion = run / "conversion.json"
    if conversion.is_file():
        report = json.loads(conversion.read_text())
        step0 = report.get("step0") or {}
        out["conversion"] = {
            "t_init": report.get("t_init"),
            "step0_kl": step0.get("kl"),
            "step0_loss": step0.get("loss"),
            "step0_teacher_loss": step0.get("teacher_loss"),
        }
    return out


def paired_stats(differences: list[float]) -> dict[str, Any]:
    """Mean, 95% t-interval and exact sign-flip p of paired differences (one per seed)."""
    from tying.evaluation.stats import paired_unit_summary

    return paired_unit_summary(differences)


def paired_summary(differences: list[float], bounds: tuple[float, float]) -> dict[str, Any]:
    """`paired_stats` and the verdict against `bounds` (the paper's range)."""
    out = paired_stats(differences)
    if out["n"] == 0:
        return {**out, "verdict": "not run"}
    if "ci95" not in out:
        return {**out, "verdict": "undecided", "note": "one seed: no interval, no test"}
    out.update(verdict_of(*out["ci95"], bounds))
    return out


def verdict_of(lo: float, hi: float, bounds: tuple[float, float]) -> dict[str, Any]:
    """ "reproduced" if [lo, hi] lies inside `bounds`, "contradicted" if it lies entirely outside
    (above or below), else "undecided" with the largest |PIT − TT| the interval leaves."""
    b_lo, b_hi = bounds
    if b_lo <= lo and hi <= b_hi:
        return {"verdict": "reproduced"}
    if hi < b_lo or lo > b_hi:
        return {"verdict": "contradicted"}
    largest = max(abs(lo), abs(hi))
    side = ""
    if lo > 0:
        side = "; PIT at or ahead of TT excluded"
    elif hi < 0:
        side = "; PIT at or behind TT excluded"
    return {
        "verdict": "undecided",
        "excluded": (
            f"PIT − TT below {lo:+.3f} or above {hi:+.3f}, so effects larger than {largest:.3f}"
            + side
        ),
        "excluded_above": largest,
    }


def timing(runs: Path, labels: tuple[str, ...] = ("tt", "pit")) -> dict[str, Any]:
    """Wall clock of a grid trained in one process, from its files' modification times: per
    finished cell, `setup_s` (from the previous cell's DONE.json to this cell's config.yaml,
    written once the teacher is loaded and converted: PIT's fit is in it; None for the first
    cell) and `wall_s` (from the previous DONE.json, or for the first cell from its own
    config.yaml, to this cell's DONE.json); `total_s` from the first
    config.yaml to the last DONE.json. Only the cells of `labels` (teacher-LABEL-sN), which
    one invocation trained; meaningless for a grid that was cut and resumed."""
    cells = sorted(
        (
            p
            for label in labels
            for p in runs.glob(f"teacher-{label}-s*")
            if p.name.rsplit("-s", 1)[0] == f"teacher-{label}" and (p / "DONE.json").is_file()
        ),
        key=lambda p: (p / "DONE.json").stat().st_mtime,
    )
    out: dict[str, Any] = {"cells": {}}
    previous = None
    for cell in cells:
        done = (cell / "DONE.json").stat().st_mtime
        start = (cell / "config.yaml").stat().st_mtime
        out["cells"][cell.name] = {
            "setup_s": None if previous is None else round(start - previous, 1),
            "wall_s": round(done - (start if previous is None else previous), 1),
        }
        previous = done
    if cells:
        first = min((c / "config.yaml").stat().st_mtime for c in cells)
        out["total_s"] = round(previous - first, 1)
    return out


def read_seed_run(folders: list[Path], name: str) -> dict[str, Any] | None:
    """`read_run` of cell `name` from the first folder that finished it; a cell finished in
    several folders must end at the same validation loss (the same recipe and seed).

    Raises:
        ValueError: two folders disagree on the cell's final loss.
    """
    found = [(f, r) for f in folders if (r := read_run(f / "runs" / name)) is not None]
    for folder, run in found[1:]:
        if abs(run["val_loss"] - found[0][1]["val_loss"]) > 1e-6:
            raise ValueError(
                f"{name}: final validation loss {found[0][1]['val_loss']} in {found[0][0]} but "
                f"{run['val_loss']} in {folder}: not the same experiment"
            )
    return found[0][1] if found else None


def teacher_block(folders: list[Path], seeds: list[int] | None = None) -> dict[str, Any]:
    """Per-seed TT and PIT runs of one teacher's experiment folders, and their paired summary."""
    found = sorted(
        {
            int(p.name.rsplit("-s", 1)[1])
            for folder in folders
            for p in (folder / "runs").glob("teacher-*-s*")
            if p.is_dir()
        }
    )
    seeds = found if seeds is None else seeds
    units, missing = [], []
    for seed in seeds:
        tt = read_seed_run(folders, f"teacher-tt-s{seed}")
        pit = read_seed_run(folders, f"teacher-pit-s{seed}")
        if tt is None or pit is None:
            missing.append(seed)
            continue
        units.append(
            {
                "seed": seed,
                "tt": tt,
                "pit": pit,
                "step0_kl_pit": (pit.get("conversion") or {}).get("step0_kl"),
                "diff_val": pit["val_loss"] - tt["val_loss"],
                "diff_train_last": pit["train_loss_last"] - tt["train_loss_last"],
            }
        )
    bounds = paper_range()
    return {
        "folders": [str(f) for f in folders],
        "timing": {str(f): timing(f / "runs") for f in folders},
        "units": units,
        "missing_seeds": missing,
        "step0_kl_pit": [u["step0_kl_pit"] for u in units],
        "val_loss": paired_summary([u["diff_val"] for u in units], bounds),
        "train_loss_last": paired_summary([u["diff_train_last"] for u in units], bounds),
        "trainable_z": trainable_z_block(folders, units),
    }


def trainable_z_block(folders: list[Path], units: list[dict[str, Any]]) -> dict[str, Any]:
    """The ablation outside the paper's recipe: PIT with Z trained (cells `teacher-pit-z-sN`),
    paired by seed with the same seed's TT and frozen-Z PIT runs (final validation loss)."""
    rows = []
    for unit in units:
        pit_z = read_seed_run(folders, f"teacher-pit-z-s{unit['seed']}")
        if pit_z is None:
            continue
        rows.append(
            {
                "seed": unit["seed"],
                "pit_z": pit_z,
                "step0_kl": (pit_z.get("conversion") or {}).get("step0_kl"),
                "minus_tt": pit_z["val_loss"] - unit["tt"]["val_loss"],
                "minus_frozen": pit_z["val_loss"] - unit["pit"]["val_loss"],
            }
        )
    return {
        "units": rows,
        "timing": {str(f): timing(f / "runs", ("pit-z",)) for f in folders},
        "minus_tt": paired_stats([r["minus_tt"] for r in rows]),
        "minus_frozen": paired_stats([r["minus_frozen"] for r in rows]),
    }


def analyse(folders: dict[str, Path]) -> dict[str, Any]:
    """The JSON of docs/results/teacher_seeds.json for {teacher name: experiment folders (one
    folder or a list, see `TEACHERS`)}."""
    from tying.evaluation.stats import holm

    teachers = {
        name: teacher_block(
            [Path(f) for f in ([given] if isinstance(given, (str, Path)) else given)]
        )
        for name, given in folders.items()
    }
    tested = [n for n, t in teachers.items() if "sign_flip" in t["val_loss"]]
    adjusted = holm([teachers[n]["val_loss"]["sign_flip"]["p"] for n in tested])
    for name, p in zip(tested, adjusted, strict=True):
        teachers[name]["val_loss"]["sign_flip"]["holm_p"] = p
    lo, hi = paper_range()
    return {
        "claim": "PIT paper (001) Table 1, Teacher rows: in teacher mode PIT's loss is at TT's level",
        "paper": {
            "table1_teacher_rows": PAPER_TABLE1,
            "differences": {k: round(r["pit"] - r["tt"], 3) for k, r in PAPER_TABLE1.items()},
            "range": [lo, hi],
            "loss": "final training loss (FineWeb-Edu)",
        },
        "rule": (
            "per teacher, the 95% t-interval of the mean PIT − TT final validation loss over "
            f"seeds: reproduced if inside [{lo}, {hi}] (the paper's own teacher-mode "
            "differences), contradicted if entirely outside, else undecided; the exact sign-flip "
            "test's smallest two-sided p with n seeds is 2/2^n (0.25 at n = 3), so it cannot reject "
            "at 0.05 with 3 seeds; Holm over the teachers"
        ),
        "configs": {n: CONFIGS.get(n) for n in folders},
        "teachers": teachers,
    }


NAMES = {"decoder": "decoder `tiny`", "gpt2": "GPT-2 (LayerNorm)", "smollm2": "SmolLM2-135M"}


def markdown(data: dict[str, Any]) -> str:
    """The tables of docs/results.md §13: per teacher and seed, then per teacher."""
    lines = [
        "| teacher | seed | PIT step-0 KL | TT val loss | PIT val loss | PIT − TT "
        "| TT train loss (last 10) | PIT train loss (last 10) | TT training (s) | PIT training (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, block in data["teachers"].items():
        for u in block["units"]:
            kl = u["step0_kl_pit"]
            lines.append(
                f"| {NAMES.get(name, name)} | seed {u['seed']} | "
                + ("–" if kl is None else f"{kl:.3f}")
                + f" | {u['tt']['val_loss']:.3f} | {u['pit']['val_loss']:.3f} | "
                f"{u['diff_val']:+.3f} | {u['tt']['train_loss_last']:.3f} | "
                f"{u['pit']['train_loss_last']:.3f} | {u['tt']['elapsed_s']:.0f} | "
                f"{u['pit']['elapsed_s']:.0f} |"
            )
    steps = sorted(
        {
            int(k)
            for b in data["teachers"].values()
            for u in b["units"]
            for k in u["tt"]["val_loss_by_step"]
        }
    )
    lines += [
        "",
        "| teacher | seed | TT / PIT validation loss at "
        + " | ".join(f"step {k}" for k in steps)
        + " |",
        "|---|---:|" + "---|" * len(steps),
    ]
    for name, block in data["teachers"].items():
        for u in block["units"]:
            cells = []
            for k in steps:
                tt = u["tt"]["val_loss_by_step"].get(str(k))
                pit = u["pit"]["val_loss_by_step"].get(str(k))
                cells.append("–" if tt is None or pit is None else f"{tt:.3f} / {pit:.3f}")
            lines.append(
                f"| {NAMES.get(name, name)} | seed {u['seed']} | " + " | ".join(cells) + " |"
            )
    lines += [
        "",
        "| teacher | n | mean PIT − TT | 95% t-interval | sign-flip p (Holm) | verdict |",
        "|---|---:|---:|---|---|---|",
    ]
    for name, block in data["teachers"].items():
        v = block["val_loss"]
        if v["n"] == 0:
            lines.append(f"| {NAMES.get(name, name)} | 0 | – | – | – | not run |")
            continue
        ci = "–" if "ci95" not in v else f"{v['ci95'][0]:+.3f} to {v['ci95'][1]:+.3f}"
        flip = v.get("sign_flip")
        p = "–" if flip is None else f"{flip['p']:.2f} ({flip.get('holm_p', flip['p']):.2f})"
        verdict = v["verdict"] + (f"; excluded: {v['excluded']}" if "excluded" in v else "")
        lines.append(
            f"| {NAMES.get(name, name)} | {v['n']} | {v['mean']:+.3f} | {ci} | {p} | {verdict} |"
        )
    lines += [
        "",
        "| teacher | seed | PIT (Z trained) step-0 KL | val loss | − TT | − PIT (Z frozen) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, block in data["teachers"].items():
        for r in block.get("trainable_z", {}).get("units", []):
            kl = "–" if r["step0_kl"] is None else f"{r['step0_kl']:.3f}"
            lines.append(
                f"| {NAMES.get(name, name)} | seed {r['seed']} | {kl} | {r['pit_z']['val_loss']:.3f} | "
                f"{r['minus_tt']:+.3f} | {r['minus_frozen']:+.3f} |"
            )
    lines += [
        "",
        "| teacher | n | Z trained − TT: mean (95% t) | Z trained − Z frozen: mean (95% t) |",
    ]
    lines.append("|---|---:|---|---|")
    for name, block in data["teachers"].items():
        z = block.get("trainable_z")
        if not z or not z["units"]:
            continue
        cells = []
        for key in ("minus_tt", "minus_frozen"):
            v = z[key]
            ci = "" if "ci95" not in v else f" ({v['ci95'][0]:+.3f} to {v['ci95'][1]:+.3f})"
            cells.append(f"{v['mean']:+.3f}{ci}")
        lines.append(f"| {NAMES.get(name, name)} | {z[key]['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--decoder", nargs="+", default=TEACHERS["decoder"], metavar="FOLDER")
    parser.add_argument("--gpt2", nargs="+", default=TEACHERS["gpt2"], metavar="FOLDER")
    parser.add_argument("--smollm2", nargs="+", default=TEACHERS["smollm2"], metavar="FOLDER")
    parser.add_argument("--out", default="docs/results/teacher_seeds.json")
    parser.add_argument(
        "--markdown", action="store_true", help="print the tables of an existing --out JSON"
    )
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.out).read_text())))
        return
    data = analyse({"decoder": args.decoder, "gpt2": args.gpt2, "smollm2": args.smollm2})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    for name, block in data["teachers"].items():
        v = block["val_loss"]
        print(name, {k: v.get(k) for k in ("n", "mean", "ci95", "sign_flip", "verdict")})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
