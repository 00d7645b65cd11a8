"""Benchmark: one training step through each token interface, TT vs PIT, chunked vs full loss.

A step is: embed(ids) -> a d×d mixing layer -> loss -> backward -> AdamW step
(+ the Stiefel retraction of Z for PIT with trainable Z). Defaults follow the
issue: V = 50,257, d = 768, N = 4,096 tokens, fp32 and bf16 autocast, one process.

Time: all variants of one precision are measured alternately in the same
process (round-robin over `--reps` rounds after a warm-up round), so the
ratios compare steps taken under the same machine load; the median is kept.

Memory: each variant runs again in a fresh child process with glibc told to
return freed blocks to the OS (`MALLOC_MMAP_THRESHOLD_`), so that after a
warm-up step the resident set is back to weights + optimizer state; the peak
resident set of the next step (VmHWM, reset through /proc/self/clear_refs)
minus the resident set before it is the step's transient memory (MiB).

Usage:
    python benchmarks/interface.py [--quick] [--out benchmarks/results/interface.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from timing import medians, round_robin, write_json
from tying import PseudoInverseTying, TransposeTying

VARIANTS = ("tt", "tt_full_logits", "pit_frozen", "pit_trainable")


def _status_mib() -> dict[str, float]:
    text = Path("/proc/self/status").read_text()
    return {k: int(re.search(rf"{k}:\s+(\d+)", text).group(1)) / 1024 for k in ("VmRSS", "VmHWM")}


def build(variant: str, V: int, d: int, N: int, seed: int = 0):
    """Interface, mixing layer, optimizer and a step function for one variant."""
    g = torch.Generator().manual_seed(seed)
    if variant.startswith("tt"):
        iface = TransposeTying.scratch(V, d, generator=g)
    else:
        iface = PseudoInverseTying.scratch(
            V, d, generator=g, trainable_z=variant == "pit_trainable"
        )
    mix = torch.nn.Linear(d, d, bias=False)
    params = list(iface.parameters()) + list(mix.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    if variant == "pit_trainable":
        iface.attach_retraction(opt)
    ids = torch.randint(0, V, (N,), generator=g)
    targets = torch.randint(0, V, (N,), generator=g)
    full_logits = variant == "tt_full_logits"

    def step(precision: str) -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            h = torch.nn.functional.gelu(mix(iface.embed(ids)))
            if full_logits:
                loss = F.cross_entropy(iface.logits(h).float(), targets)
            else:
                loss = iface.loss(h, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach().item()

    return step


def time_variants(precision: str, V: int, d: int, N: int, reps: int) -> dict[str, dict]:
    """Median step time (s) of each variant, measured round-robin in this process."""
    steps = {v: build(v, V, d, N) for v in VARIANTS}
    times = round_robin(
        {v: (lambda s=s: s(precision)) for v, s in steps.items()}, reps, f"[{precision}] "
    )
    return {v: {"median_s": m, "all_s": times[v]} for v, m in medians(times).items()}


def memory_child(variant: str, precision: str, V: int, d: int, N: int) -> None:
    """Run in a child process: print the step's transient peak memory as JSON."""
    step = build(variant, V, d, N)
    step(precision)  # warm-up: allocates optimizer state
    before = _status_mib()["VmRSS"]
    Path("/proc/self/clear_refs").write_text("5")
    step(precision)
    after = _status_mib()
    print(
        json.dumps(
            {
                "rss_before_mib": before,
                "peak_mib": after["VmHWM"],
                "step_peak_mib": after["VmHWM"] - before,
            }
        )
    )


def measure_memory(variant: str, precision: str, V: int, d: int, N: int) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    cmd = [
        sys.executable,
        __file__,
        "--child",
        variant,
        precision,
        f"--V={V}",
        f"--d={d}",
        f"--N={N}",
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--V", type=int, default=50257)
    parser.add_argument("--d", type=int, default=768)
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small shapes, 2 reps (smoke run)")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "interface.json"))
    parser.add_argument(
        "--child", nargs=2, metavar=("VARIANT", "PRECISION"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.quick:
        args.V, args.d, args.N, args.reps = 4000, 128, 512, 2
    if args.child:
        memory_child(args.child[0], args.child[1], args.V, args.d, args.N)
        return

    result: dict = {
        "benchmark": "interface training step",
        "shape": {"V": args.V, "d": args.d, "N": args.N},
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
        "precisions": {},
    }
    for precision in args.precisions.split(","):
        print(f"timing {precision} ...", flush=True)
        timing = time_variants(precision, args.V, args.d, args.N, args.reps)
        print(f"memory {precision} ...", flush=True)
        memory = {v: measure_memory(v, precision, args.V, args.d, args.N) for v in VARIANTS}
        tt = timing["tt"]["median_s"]
        full = timing["tt_full_logits"]["median_s"]
        result["precisions"][precision] = {
            "time": timing,
            "memory": memory,
            "ratios": {
                "pit_frozen_over_tt_time": timing["pit_frozen"]["median_s"] / tt,
                "pit_trainable_over_tt_time": timing["pit_trainable"]["median_s"] / tt,
                "chunked_over_full_peak_memory": memory["tt"]["step_peak_mib"]
                / memory["tt_full_logits"]["step_peak_mib"],
                "chunked_speed_over_full": full / tt,
            },
        }
        print(json.dumps(result["precisions"][precision]["ratios"], indent=2), flush=True)
    write_json(result, args.out)


if __name__ == "__main__":
    main()
