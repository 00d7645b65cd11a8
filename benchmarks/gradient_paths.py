"""Benchmark: cost of gradient-path tracking on the `mini` preset (target ≤ 10% step time).

One optimizer step = `--accum` micro-batches (forward, backward) + AdamW, bf16
autocast, TT (and PIT) interface. With tracking, the tied matrix is used
through one view per side and both V×d side gradients are accumulated and
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

from timing import medians, round_robin, write_json
from tying.analysis.gradient_paths import GradientPathTracker
from tying.decoder.decoder import Decoder
from tying.decoder.presets import preset_config


def make_step(tie: str, track: bool, args, batches):
    torch.manual_seed(0)
    model = Decoder(preset_config(args.preset, vocab_size=args.vocab, tie=tie))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tracker = GradientPathTracker(model.interface) if track else None

    def step() -> dict:
        if tracker is not None:
            tracker.start_step()
        for x, y in batches:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(x, y)
            (loss / len(batches)).backward()
        row = tracker.finish_step() if tracker is not None else {}
        opt.step()
        opt.zero_grad(set_to_none=True)
        return row

    return step


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
