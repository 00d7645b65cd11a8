"""Benchmark: reference log-likelihoods with the head on the continuation positions only
(`TyingLM(continuation_logits=True)`, the default) against lm-eval's HFLM forward on every
position (`continuation_logits=False`), through `tying evaluate`'s own path.

Each model is loaded once and wrapped twice; both wrappers score the same seeded MBPP items
(`--limit`, 3-shot prompt in the task, the reference program as continuation: the longest
prompts of the four tasks), likelihood only, fp32, batch 16. The run checks that both give the
same per-item log-likelihoods (largest absolute difference, nats), and times them alternately
(`benchmarks/timing.py`: one evaluation of each per round after a warm-up round, medians).
ratio = every position / continuation only (> 1: the default is faster).

Models: a spec each (`--specs`): "smollm2" (SmolLM2-135M: d 576, 30 layers, V 49,152) and, by
default, a base of the update experiment (our tiny decoder, d 256, 4 layers, V 50,257), where
the head is most of the work.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/continuation_logits.py \\
        [--specs runs/experiment-update-units/runs/teacher-tt-s0/checkpoints/step-0000010,smollm2] \\
        [--limit 50] [--reps 3] [--out benchmarks/results/continuation_logits.json]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch

from timing import medians, round_robin, write_json
from tying.evaluation.evaluate import EvaluateOptions, evaluate_model
from tying.evaluation.harness import TyingLM
from tying.evaluation.loading import load_for_evaluation

TASK = "mbpp"


def measure(spec: str, limit: int, reps: int) -> dict:
    """Time both wrappers of one model on the same items; check they agree."""
    loaded = load_for_evaluation(spec, dtype=torch.float32, device=torch.device("cpu"))
    wrappers = {
        name: TyingLM(loaded.model, loaded.tokenizer, batch_size=16, continuation_logits=keep)
        for name, keep in (("every_position", False), ("continuation_only", True))
    }
    scratch = Path(tempfile.mkdtemp(prefix="continuation-logits-"))
    results: dict[str, dict] = {}

    def evaluation(name: str):
        def run() -> None:
            options = EvaluateOptions(
                spec=spec,
                tasks=[TASK],
                out=str(scratch / name),
                limit=limit,
                batch_size=16,
                precision="fp32",
                generate=False,
                overwrite=True,
            )
            results[name] = evaluate_model(options, lm=wrappers[name])

        return run

    times = round_robin({name: evaluation(name) for name in wrappers}, reps, label=f"{spec} ")
    items = {name: r["tasks"][TASK]["items"] for name, r in results.items()}
    gap = max(
        abs(a["ref_loglik"] - b["ref_loglik"])
        for a, b in zip(items["every_position"], items["continuation_only"], strict=True)
    )
    med = medians(times)
    entry = results["continuation_only"]["tasks"][TASK]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "items": entry["n"],
        "reference_tokens": entry["ref_tokens"],
        "parameters": sum(p.numel() for p in loaded.model.parameters()),
        "max_abs_loglik_difference_nats": gap,
        "ref_loglik_per_token": {
            n: r["tasks"][TASK]["ref_loglik_per_token"] for n, r in results.items()
        },
        "time_s": {k: {"median": med[k], "all": v} for k, v in times.items()},
        "ratio_every_position_over_continuation_only": med["every_position"]
        / med["continuation_only"],
    }
    print(
        f"{spec}: every position / continuation only = "
        f"{result['ratio_every_position_over_continuation_only']:.2f}, "
        f"largest log-likelihood difference {gap:.2e} nats"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--specs",
        default="runs/experiment-update-units/runs/teacher-tt-s0/checkpoints/step-0000010,smollm2",
        help="comma-separated model specs",
    )
    parser.add_argument("--limit", type=int, default=50, help="seeded MBPP items")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "continuation_logits.json")
    )
    args = parser.parse_args()
    specs = [s.strip() for s in args.specs.split(",") if s.strip()]
    result = {
        "benchmark": "reference log-likelihoods: head on continuation positions vs every position",
        "task": TASK,
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
        "models": {spec: measure(spec, args.limit, args.reps) for spec in specs},
    }
    write_json(result, args.out)


if __name__ == "__main__":
    main()
