"""The weight-tying-bias paper's input-gradient-scaling ablation (§6, Table 2; Appendix E, Tables
6 and 7) on the runs of configs/experiments/input_grad_scale.yaml.

For every finished TT run (×1, ×2, ×5, ×10), at the first and the last checkpoint step it shares
with the untied reference run, the cosine similarity after orthogonal (Procrustes) alignment of the untied model's E and U onto the tied
matrix (`tying.analysis.alignment`'s orthogonal score, the paper's direction: untied → tied; the
measure of Tables 2 and 6), and the run's validation loss (Table 7's
perplexity). Each run is compared with every finished untied run: the one of its own seed
(the same initial E, as the grid pairs them) and the one of the other seed (independently
trained, as the paper's OLMo-1B-0724 is). Per seed, each scale's value minus the ×1 run's of the same seed (the same
initial E, the same data order) is the paired effect; the seed is the unit.

    python -m studies.input_grad_scale [EXPERIMENT_DIR] [--out docs/results/input_grad_scale.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from tying.analysis.alignment import centred, procrustes_map
from tying.analysis.rowwise import row_cosine
from tying.loader import load_any
from tying.probe.checkpoints import checkpoint_matrices
from tying.train.checkpoint import list_checkpoints

SCALES = {"tt": 1, "tt-x2": 2, "tt-x5": 5, "tt-x10": 10}


def orthogonal(src: torch.Tensor, tgt: torch.Tensor) -> float:
    """`tying.analysis.alignment`'s orthogonal score alone (centred, Procrustes, mean cosine)."""
    S, T = centred(src), centred(tgt)
    return float(row_cosine(S @ procrustes_map(S, T), T).mean())


def finished(run: Path) -> bool:
    return (run / "DONE.json").exists()


def matrices(run: Path) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """{step: (E, U)} of every checkpoint of a run."""
    loaded = load_any(run)
    ckpts = list_checkpoints(run)
    return {
        step: (E.double(), U.double())
        for step, E, U in checkpoint_matrices(loaded.model, loaded.interface, ckpts)
    }


def val_losses(run: Path) -> dict[int, float]:
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("val_loss") is not None:
            out[int(row["step"])] = float(row["val_loss"])
    return out


def markdown(data: dict) -> str:
    """The table of docs/results.md §11: orthogonal alignment of the untied E (input) and U
    (output) onto each TT run's matrix, early and final, against both untied references."""
    early, final = data["steps"]["early"], data["steps"]["final"]
    head = (
        f"| run | scale | val loss | step {early}: E, same seed | U, same seed "
        f"| step {final}: E, same seed | U, same seed | step {final}: E, other seed "
        "| U, other seed |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in sorted(data["runs"].items(), key=lambda kv: (kv[1]["seed"], kv[1]["scale"])):
        cells = [name, f"×{r['scale']}", f"{r['val_loss'][str(final)]:.3f}"]
        for ref, step in (("same", early), ("same", final), ("cross", final)):
            seed = r["seed"] if ref == "same" else 1 - r["seed"]
            rows = r["against"].get(f"untied-s{seed}")
            for side in ("input", "output"):
                cells.append("–" if rows is None else f"{rows[str(step)][side]['orthogonal']:.4f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("experiment", nargs="?", default="runs/experiment-input-grad-scale")
    ap.add_argument("--out", default="docs/results/input_grad_scale.json")
    ap.add_argument(
        "--markdown", action="store_true", help="print docs/results.md §11's table from --out"
    )
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(Path(args.out).read_text())))
        return 0
    root = Path(args.experiment) / "runs"
    refs = {
        seed: matrices(root / f"scratch-untied-s{seed}")
        for seed in (0, 1)
        if finished(root / f"scratch-untied-s{seed}")
    }
    if 0 not in refs:
        print("scratch-untied-s0 has not finished", file=sys.stderr)
        return 1
    runs = []
    for label, scale in SCALES.items():
        for seed in (0, 1):
            run = root / f"scratch-{label}-s{seed}"
            if not finished(run):
                continue
            mats = matrices(run)
            entry = {
                "name": run.name,
                "scale": scale,
                "seed": seed,
                "val_loss": {str(k): v for k, v in val_losses(run).items()},
                "against": {},
            }
            for ref_seed, ref in sorted(refs.items()):
                rows = {}
                common = sorted(set(mats) & set(ref))
                for step in (common[0], common[-1]):  # the early and the final checkpoint
                    E = mats[step][0]
                    rE, rU = ref[step]
                    rows[str(step)] = {
                        "input": {"orthogonal": orthogonal(rE, E)},  # Input (U) → Tied
                        "output": {"orthogonal": orthogonal(rU, E)},  # Output (U) → Tied
                    }
                entry["against"][f"untied-s{ref_seed}"] = rows
            runs.append(entry)
            print(run.name, "done", flush=True)
    steps = sorted({int(s) for r in runs for s in r["against"]["untied-s0"]})
    early, final = steps[0], steps[-1]
    # paired effects: scale − ×1 of the same seed, orthogonal, against each reference
    # ("same" = the untied run of the run's own seed, "cross" = the other seed's)
    effects: dict = {}
    base = {r["seed"]: r for r in runs if r["scale"] == 1}
    for r in runs:
        if r["scale"] == 1 or r["seed"] not in base:
            continue
        b = base[r["seed"]]
        e: dict = {"val_loss": r["val_loss"][str(final)] - b["val_loss"][str(final)]}
        for kind, ref_seed in (("same", r["seed"]), ("cross", 1 - r["seed"])):
            ref = f"untied-s{ref_seed}"
            if ref not in r["against"]:
                continue
            e[kind] = {}
            for step in (early, final):
                a, c = r["against"][ref][str(step)], b["against"][ref][str(step)]
                e[kind][str(step)] = {
                    side: a[side]["orthogonal"] - c[side]["orthogonal"]
                    for side in ("input", "output")
                }
        effects.setdefault(f"x{r['scale']}", {})[f"s{r['seed']}"] = e
    out = {
        "what": "cosine after alignment of the untied run's E (input) and U (output) onto the "
        "tied TT matrix, per checkpoint step; orthogonal = the paper's Procrustes measure",
        "experiment": "configs/experiments/input_grad_scale.yaml",
        "reference": "every finished untied run; `same` = the run's own seed (the same initial "
        "E), `cross` = the other seed",
        "steps": {"early": early, "final": final},
        "runs": {r["name"]: r for r in runs},
        "effects_vs_x1": effects,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
