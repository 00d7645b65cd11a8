"""Benchmark: cost of gradient-path tracking on the `mini` preset (target ≤ 10% step time).

One optimizer step = `tying.train.loop.train_step` as `tying train` takes it
(`benchmarks/steps.py`): `--accum` micro-batches (forward, backward), clipping, the run's
AdamW groups, bf16 autocast, TT (and PIT, Z frozen) interface; tracking is the run's own
(`track_gradient_paths=true`: the tracker `tying train` attaches). With tracking, the tied
matrix is used through one view per side and both V×d side gradients are accumulated and
reduced to norms (`GradientPathTracker`). Steps with and without tracking are
alternated in one run; medians are compared.

Usage:
    python benchmarks/gradient_paths.py [--quick] [--out benchmarks/results/gradient_paths.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from steps import project_step, train_config
from timing import medians, round_robin, write_json
from tying.train.build import build_model


def make_step(tie: str, track: bool, args, batches):
    """`tying.train.loop.train_step` of a `tie` run, tracked or not; returns the tracker's row."""
    torch.manual_seed(0)
    cfg = train_config(
        [
            f"preset={args.preset}",
            f"tie={tie}",
            f"seq_len={args.seq_len}",
            "precision=bf16",
            "compile=false",
            f"track_gradient_paths={str(track).lower()}",
            *(["pit.trainable_z=false"] if tie == "pit" else []),
        ]
    )
    step = project_step(build_model(cfg, args.vocab), cfg, batches)

    def run() -> dict:
        return step().extra

    return run


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "gradient_paths.json")
    )
    args = parser.parse_args()
    if args.quick:
        args.preset, args.batch, args.seq_len, args.reps = "tiny", 2, 64, 2
    g = torch.Generator().manual_seed(0)
    batches = [
        (torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=g),) * 2
        for _ in range(args.accum)
    ]
    variants = {
        f"{tie}_{'tracked' if track else 'plain'}": make_step(tie, track, args, batches)
        for tie in ("tt", "pit")
        for track in (False, True)
    }
    sample: dict[str, dict] = {}

    def recording(name: str, step):
        def run() -> None:
            sample[name] = step()

        return run

    times = round_robin({k: recording(k, v) for k, v in variants.items()}, args.reps)
    median = medians(times)
    result = {
        "benchmark": "gradient-path tracking overhead",
        "preset": args.preset,
        "tokens_per_step": args.batch * args.seq_len * args.accum,
        "step_time_s": {k: {"median": median[k], "all": times[k]} for k in times},
        "overhead": {
            tie: median[f"{tie}_tracked"] / median[f"{tie}_plain"] - 1 for tie in ("tt", "pit")
        },
        "last_tracked_rows": {k: v for k, v in sample.items() if v},
    }
    print(json.dumps(result["overhead"], indent=2))
    write_json(result, args.out)


if __name__ == "__main__":
    main()
