"""The scratch point of configs/experiments/scratch_small_gpu.yaml beside the PIT paper's Table 1
scratch rows: TT, our scratch PIT and the paper's PIT recipe (Z frozen, T = I) at the `small`
preset (Table 3's Small shape), one seed, equal tokens.

Per run (its metrics.jsonl): the validation losses (nats/token, every 25 steps = 1,638,400
tokens), the training losses, the steps reached and the median tokens/s. The runs trained at once
on one GPU beside the test suite, and a time limit stopped them at different steps, so they are
compared at their last common validation step (equal tokens) and, for the training loss the
paper reports, as the mean over the 10 steps that end there. One seed: a difference, not an
interval (no seed is a replicate of another here).

    python -m studies.scratch_point [RUNS] [--out docs/results/scratch_small_gpu.json]
        [--figure docs/results/scratch_small_gpu.png]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from tying.train.metrics import read_metrics

#: The PIT paper's Table 1, Scratch rows: final training loss (TT, PIT) per model.
PAPER_TABLE1_SCRATCH = {
    "Llama-303M": {"tt": 2.875, "pit": 3.915},
    "Llama-613M": {"tt": 3.599, "pit": 4.027},
    "Llama-1.17B": {"tt": 2.907, "pit": 4.174},
}
RUNS = {"tt": "scratch-tt-s0", "pit": "scratch-pit-s0", "pit-paper": "scratch-pit-paper-s0"}
#: Training-loss rows averaged at the comparison step.
TRAIN_WINDOW = 10


def run_record(run_dir: Path) -> dict[str, Any]:
    """Steps, validation losses (and the tokens trained when each was taken), training losses
    (and the tokens trained after each step) and the median tokens/s of one run; metrics.jsonl's
    `tokens` counts the tokens trained so far."""
    rows = read_metrics(run_dir)
    train = [r for r in rows if "lr" in r]
    val = [r for r in rows if "val_loss" in r]
    return {
        "run": run_dir.name,
        "steps": len(train),
        "val_loss": {int(r["step"]): r["val_loss"] for r in val},
        "val_tokens": {int(r["step"]): r["tokens"] for r in val},
        "train_loss": [r["loss"] for r in train],
        "train_tokens": [r["tokens"] for r in train],
        "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in train[1:]),
    }


def analyze(runs_dir: Path) -> dict[str, Any]:
    """The JSON of docs/results/scratch_small_gpu.json (see the module docstring)."""
    records = {label: run_record(runs_dir / name) for label, name in RUNS.items()}
    common = sorted(set.intersection(*(set(r["val_loss"]) for r in records.values())))
    if not common:
        raise ValueError(f"the runs under {runs_dir} share no validation step")
    step = common[-1]
    tt = records["tt"]
    compared: dict[str, Any] = {"step": step, "tokens": tt["val_tokens"][step]}
    for label, record in records.items():
        window = record["train_loss"][step - TRAIN_WINDOW : step]
        compared[label] = {
            "val_loss": record["val_loss"][step],
            "train_loss_mean_last_10": sum(window) / len(window),
        }
    for label in ("pit", "pit-paper"):
        compared[f"{label}_minus_tt"] = {
            key: compared[label][key] - compared["tt"][key]
            for key in ("val_loss", "train_loss_mean_last_10")
        }
    # TT against the paper's recipe at every validation both reached
    both = sorted(set(tt["val_loss"]) & set(records["pit-paper"]["val_loss"]))
    return {
        "config": "configs/experiments/scratch_small_gpu.yaml",
        "machine": "one NVIDIA H200 (Python 3.12.3, torch 2.11.0+cu130), the three runs at once "
        "beside the test suite, 2026-11-26",
        "seed": 0,
        "paper_table1_scratch_train_loss": PAPER_TABLE1_SCRATCH,
        "runs": records,
        "last_common_validation": compared,
        "pit_paper_minus_tt_val_by_step": {
            s: records["pit-paper"]["val_loss"][s] - tt["val_loss"][s] for s in both
        },
    }


def figure(result: dict[str, Any], path: Path) -> None:
    """Training loss (lines) and validation loss (dots), nats/token, against training tokens
    (millions), one colour per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, record in result["runs"].items():
        millions = [t / 1e6 for t in record["train_tokens"]]
        (line,) = ax.plot(millions, record["train_loss"], lw=1, alpha=0.6, label=label)
        steps = sorted(record["val_loss"])
        ax.plot(
            [record["val_tokens"][s] / 1e6 for s in steps],
            [record["val_loss"][s] for s in steps],
            "o",
            color=line.get_color(),
        )
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("loss (nats/token): training (line), validation (dots)")
    ax.set_title("`small` preset from scratch, seed 0, one H200")
    ax.set_ylim(top=11.5)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="?", default="runs/experiment-scratch-small-gpu/runs")
    parser.add_argument("--out", default="docs/results/scratch_small_gpu.json")
    parser.add_argument("--figure", default="docs/results/scratch_small_gpu.png")
    args = parser.parse_args()
    result = analyze(Path(args.runs))
    figure(result, Path(args.figure))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    c = result["last_common_validation"]
    print(f"last common validation: step {c['step']} ({c['tokens']:,} tokens)")
    for label in RUNS:
        print(
            f"  {label:10s} val {c[label]['val_loss']:.4f}  train {c[label]['train_loss_mean_last_10']:.4f}"
        )
    print(f"wrote {args.out} and {args.figure}")


if __name__ == "__main__":
    main()
