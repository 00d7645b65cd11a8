"""Benchmark: step time of PIT's scratch options (how Z and T are trained) against TT's.

One optimizer step as `tying train` takes it, `tying.train.loop.train_step` itself
(`benchmarks/steps.py`): `--accum` micro-batches (forward, backward, bf16 autocast) of the
`tiny` preset at V = 50,257, gradient clipping, the step's one host sync, the run's optimizers
(`tying.train.optim.optimizers_for_run`: AdamW groups, the polar retraction hook, the
Stiefel RiemannianAdam for Z or the SPD Riemannian Adam for T), at the CPU grid's shape
(2 micro-batches of 8 × 256 tokens = 4,096 tokens a step). Steps of the variants are alternated (round-robin) and medians
compared, so the ratios compare steps taken under the same machine load. The issue's
budget: at most 1.1× TT's step time.

With `--teacher MODEL` (e.g. smollm2) it times the step of `tying demo`'s continued
pretraining instead: TT and PIT converted from MODEL (teacher mode: Z frozen, the blocks
trained, gradient paths tracked), 2 micro-batches of 4 × 256 tokens, in fp32 and in bf16
autocast, each precision's two runs alternated. PIT is the closed-form conversion
(t_init=output, no calibration text needed) unless `--pit-weights` names a run checkpoint's
model.safetensors (e.g. the demo's fitted PIT run), whose weights are loaded into it: what a
step costs does not depend on how T was found unless the values do (subnormal numbers).
Wall and process CPU seconds are both recorded (CPU seconds are the steadier on a busy
machine).

Usage:
    python benchmarks/pit_step_time.py [--quick] [--out benchmarks/results/pit_step_time.json]
    python benchmarks/pit_step_time.py --teacher smollm2 [--pit-weights PATH] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from steps import project_step, train_config
from timing import cpu_description, medians, round_robin, write_json
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


#: `tying demo`'s step (`tying.experiment.demo.demo_config`): 2 micro-batches of 4 × 256.
DEMO_SHAPE = {"batch": 4, "seq_len": 256, "accum": 2}


def teacher_steps(args: argparse.Namespace) -> dict[str, object]:
    """Step times of TT and PIT continued from `args.teacher`, fp32 and bf16 (see the docstring)."""
    shape = DEMO_SHAPE
    from tying.data.tokenizer import load_tokenizer
    from tying.train.build import tokenizer_spec

    g = torch.Generator().manual_seed(0)
    results: dict[str, object] = {}
    for precision in ("fp32", "bf16"):
        steps = {}
        for tie in ("tt", "pit"):
            overrides = [
                f"tie={tie}",
                f"model={args.teacher}",
                f"precision={precision}",
                "compile=false",
                "track_gradient_paths=true",
                f"seq_len={shape['seq_len']}",
                f"micro_batch_size={shape['batch']}",
                f"global_batch_tokens={shape['batch'] * shape['seq_len'] * shape['accum']}",
            ]
            if tie == "pit":
                overrides += ["pit.t_init=output", "pit.input_scale=1"]
            cfg = train_config(overrides)
            model = build_model(cfg, load_tokenizer(tokenizer_spec(cfg)).vocab_size)
            if tie == "pit" and args.pit_weights:
                from safetensors.torch import load_file

                model.load_state_dict(load_file(args.pit_weights), strict=True)
            vocab = model.interface.vocab_size
            batches = [
                (
                    torch.randint(0, vocab, (shape["batch"], shape["seq_len"]), generator=g),
                    torch.randint(0, vocab, (shape["batch"], shape["seq_len"]), generator=g),
                )
                for _ in range(shape["accum"])
            ]
            steps[tie] = _with_cpu_time(project_step(model, cfg, batches))
        cpu: dict[str, list[float]] = {name: [] for name in steps}
        timed = {name: _recording(step, cpu[name]) for name, step in steps.items()}
        times = round_robin(timed, args.reps, label=f"{precision} ")
        for name in cpu:
            del cpu[name][0]  # the warm-up round
        median = medians(times)
        results[precision] = {
            "step_s": {k: {"median": median[k], "all": times[k]} for k in times},
            "cpu_s": {k: {"median": statistics.median(v), "all": v} for k, v in cpu.items()},
            "pit_over_tt_wall": median["pit"] / median["tt"],
            "pit_over_tt_cpu": statistics.median(cpu["pit"]) / statistics.median(cpu["tt"]),
            "load_average_after": os.getloadavg()[0],
        }
        del steps, timed
    return results


def _with_cpu_time(step):
    def timed() -> float:
        t0 = time.process_time()
        step()
        return time.process_time() - t0

    return timed


def _recording(step, into: list[float]):
    def run() -> None:
        into.append(step())

    return run


def teacher_main(args: argparse.Namespace) -> None:
    load_before = os.getloadavg()[0]
    shape = DEMO_SHAPE
    result = {
        "benchmark": "TT vs PIT continued-pretraining step of `tying demo`, fp32 and bf16",
        "teacher": args.teacher,
        "pit_weights": args.pit_weights or "closed form (t_init=output, input_scale=1)",
        "shape": {**shape, "tokens_per_step": shape["batch"] * shape["seq_len"] * shape["accum"]},
        "machine": {
            "platform": platform.platform(),
            "cpu": cpu_description(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "load_average_before": load_before,
        },
        "note": "per precision, TT and PIT steps alternated (round-robin) after a warm-up round; "
        "wall and process CPU seconds per step, medians",
        **teacher_steps(args),
    }
    summary = {
        p: {
            "tt_s": round(result[p]["step_s"]["tt"]["median"], 2),
            "pit_s": round(result[p]["step_s"]["pit"]["median"], 2),
            "pit_over_tt_cpu": round(result[p]["pit_over_tt_cpu"], 3),
        }
        for p in ("fp32", "bf16")
    }
    print(json.dumps(summary, indent=2))
    write_json(result, args.out)


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
    parser.add_argument("--teacher", help="time the demo's teacher-mode step of this model")
    parser.add_argument("--pit-weights", help="--teacher: a PIT run's model.safetensors")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    results = Path(__file__).parent / "results"
    if args.teacher:
        args.out = args.out or str(results / "pit_step_time_teacher.json")
        teacher_main(args)
        return
    args.out = args.out or str(results / "pit_step_time.json")
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
