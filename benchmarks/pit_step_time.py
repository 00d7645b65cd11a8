"""Benchmark: step time of PIT's scratch options (how Z and T are trained) against TT's.

One optimizer step as `tying train` takes it, `tying.train.loop.train_step` itself
(`benchmarks/steps.py`): `--accum` micro-batches (forward, backward, bf16 autocast) of the
`tiny` preset at V = 50,257, gradient clipping, the step's one host sync, the run's optimizers
(`tying.train.optim.optimizers_for_run`: AdamW groups, the polar retraction hook, the
Stiefel RiemannianAdam for Z or the SPD Riemannian Adam for T), at the CPU grid's shape
(2 micro-batches of 8 × 256 tokens = 4,096 tokens a step). Steps of the variants are alternated (round-robin) and medians
compared, so the ratios compare steps taken under the same machine load. The issue's
budget: at most 1.1× TT's step time.

Usage:
    python benchmarks/pit_step_time.py [--quick] [--out benchmarks/results/pit_step_time.json]
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

from steps import project_step, train_config
from timing import medians, round_robin, write_json
from tying.train.build import build_model

VARIANTS: dict[str, list[str]] = {
    "tt": ["tie=tt"],
    "pit_adamw": ["tie=pit"],
    "pit_frozen_z": ["tie=pit", "pit.trainable_z=false"],
    "pit_z_entry_size": ["tie=pit", "pit.z_lr_scale=entry_size"],
    "pit_z_riemannian_adam": [
        "tie=pit",
        "pit.z_optimizer=riemannian_adam",
        "pit.z_lr_scale=entry_size",
    ],
    "pit_t_riemannian_adam": ["tie=pit", "pit.t_optimizer=riemannian_adam"],
    "pit_t_auto": ["tie=pit", "pit.t_scale=auto"],
}


def make_step(overrides: list[str], vocab: int, batches):
    """`tying.train.loop.train_step` of the run `overrides` describe (bf16, eager), on `batches`."""
    cfg = train_config([*overrides, "precision=bf16", "compile=false"])
    return project_step(build_model(cfg, vocab), cfg, batches)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="V = 4096, 1 micro-batch, 2 reps")
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "pit_step_time.json")
    )
    args = parser.parse_args()
    if args.quick:
        args.vocab, args.reps, args.batch, args.seq_len, args.accum = 4096, 2, 2, 64, 1
    g = torch.Generator().manual_seed(0)
    batches = [
        (
            torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=g),
            torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=g),
        )
        for _ in range(args.accum)
    ]
    steps = {name: make_step(o, args.vocab, batches) for name, o in VARIANTS.items()}
    times = round_robin(steps, args.reps)
    median = medians(times)
    tokens = args.batch * args.seq_len * args.accum
    result = {
        "benchmark": "PIT step time by way of training Z (tiny preset)",
        "shape": {
            "vocab": args.vocab,
            "batch": args.batch,
            "seq_len": args.seq_len,
            "accum": args.accum,
            "tokens_per_step": tokens,
        },
        "variants": VARIANTS,
        "machine": {
            "platform": platform.platform(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
        "note": "interleaved repeats (round-robin), medians; ratios compare steps taken under "
        "the same machine load",
        "step_ms": {
            k: {"median": 1e3 * median[k], "all": [1e3 * t for t in times[k]]} for k in times
        },
        "tokens_per_s": {k: tokens / median[k] for k in median},
        "ratio_to_tt": {k: median[k] / median["tt"] for k in median},
    }
    step_ms = {k: round(1e3 * v, 1) for k, v in median.items()}
    ratios = {k: round(v, 3) for k, v in result["ratio_to_tt"].items()}
    print(json.dumps({"step_ms": step_ms, "ratio_to_tt": ratios}, indent=2))
    write_json(result, args.out)


if __name__ == "__main__":
    main()
