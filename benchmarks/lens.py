"""Benchmark: the logit lens of SmolLM2-135M against the bf16 head products it needs.

In one process, on the first N tokens of the Gutenberg validation text (windows of 256), timed
round-robin (`timing.round_robin`, after a warm-up on the first batch of 1,024 positions, which
also compiles the lens's row kernels: `warmup_seconds` records that one-off cost):

- `head_matmul_bf16`: the floor: (L + 1) bf16 products (chunk × d) · (d × V) per chunk of
  positions into a reused buffer, nothing else (L = 30, d = 576, V = 49,152);
- `forward`: one forward pass of the model over the same tokens (float32);
- `logit_lens_bf16`: `evaluate_lens(..., precision="bf16")` (the new default on a CPU with
  native bf16): the forward pass, the shared final distribution and the streamed heads, with
  the row kernels compiled (`tying.lens.kernels`);
- `logit_lens_fp32`: the same with float32 products (`--precision fp32`);
- `logit_lens_bf16_eager`: `logit_lens_bf16` with the row kernels eager (`TYING_COMPILE=0`);
- `logit_lens_before`: the algorithm before `LensHead` (main at 86218cd): logits of every
  entry under bf16 autocast, then `FinalDistribution.kl_bits` in float32.

`ratio` = logit_lens_bf16 / head_matmul_bf16 (goal <= 2), and `ratio_heads_only` with the
forward pass taken out. The KLs of the bf16, fp32 and before paths are compared (bits/token).

Then, one after the other, the whole verb in fresh processes, `tying lens smollm2 --kind logit
--max-tokens M` with the default precision (auto): `before` from the code at BEFORE_SRC (main),
`after` from this tree.

The machine is shared: the wall times are upper bounds; the ratios taken side by side in one
run are what counts. The load average is recorded.

Usage:
    python benchmarks/lens.py [--tokens 1024] [--cli-tokens 2048] [--reps 2]
        [--before-src /work/main/src] [--out benchmarks/results/lens.json] [--verb-only]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from timing import cpu_model, medians, round_robin, write_json

ROOT = Path(__file__).resolve().parent.parent


def _batches(lm, tokens: int, seq_len: int = 256, batch_size: int = 4) -> list[torch.Tensor]:
    from tying.data.corpus import default_validation_source, prepare_store
    from tying.lens.data import eval_window_count, window_batches

    store = prepare_store(
        str(default_validation_source()),
        lm.tokenizer,
        expected_vocab_size=lm.vocab_size,
        allow_padded_vocab=True,
        progress=False,
    )
    n = eval_window_count(store, seq_len, tokens)
    return list(window_batches(store, range(n), seq_len, batch_size))


@torch.no_grad()
def _before(lm, batches, chunk_tokens: int = 1024) -> list[float]:
    """main's evaluate_lens at 86218cd with precision auto on this CPU (bf16 autocast)."""
    from tying.lens.kl import FinalDistribution

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16)

    sums = torch.zeros(lm.n_entries, dtype=torch.float64)
    count = 0
    for ids in batches:
        with autocast():
            states, final = lm.states_and_final(ids)
        n = ids.numel()
        flat = [s.reshape(n, s.shape[-1]) for s in states]
        final = final.reshape(n, final.shape[-1])
        for start in range(0, n, chunk_tokens):
            stop = min(start + chunk_tokens, n)
            with autocast():
                target = FinalDistribution.from_logits(lm.logits_from_hidden(final[start:stop]))
            for i, state in enumerate(flat):
                with autocast():
                    logits = lm.lens_logits(state[start:stop])
                sums[i] += target.kl_bits(logits).sum().double()
        count += n
    return (sums / count).tolist()


def _verb(src: Path, tokens: int, out: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, "-m", "tying", "lens", "smollm2", "--kind", "logit"]
    cmd += ["--max-tokens", str(tokens), "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, cwd=ROOT)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--cli-tokens", type=int, default=2048)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--note",
        default="wall times depend on the machine's load (loadavg); ratios side by side in one "
        "run are what counts",
        help="how the machine was used during the run, recorded in the JSON",
    )
    parser.add_argument("--before-src", default="/work/main/src")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/lens.json"))
    parser.add_argument(
        "--verb-only", action="store_true", help="time only the verb, into the existing --out"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.verb_only:
        result = json.loads(Path(args.out).read_text())
        _time_verb(args, result)
        return

    from tying.lens import LogitLens, evaluate_lens
    from tying.lens.head import LensHead
    from tying.lens.kernels import COMPILE_ENV
    from tying.loader import load_any

    lm = load_any("smollm2")
    batches = _batches(lm, args.tokens)
    n = sum(b.numel() for b in batches)
    head = LensHead.of(lm, "bf16")
    chunk = 1024
    d, V, entries = lm.d_model, lm.vocab_size, lm.n_entries
    g = torch.Generator().manual_seed(0)
    h = torch.randn(chunk, d, generator=g).bfloat16()
    out = torch.empty(chunk, V, dtype=torch.bfloat16)

    def matmul() -> None:
        for start in range(0, n, chunk):
            rows = min(chunk, n - start)
            for _ in range(entries):
                torch.mm(h[:rows], head.weight.t(), out=out[:rows])

    def forward() -> None:
        with torch.no_grad():
            for ids in batches:
                lm.states_and_final(ids)

    kls: dict[str, list[float]] = {}

    def lens(precision: str):
        def step() -> None:
            kls[precision] = evaluate_lens(lm, LogitLens(), batches, precision=precision).kl

        return step

    def eager() -> None:
        previous = os.environ.get(COMPILE_ENV)
        os.environ[COMPILE_ENV] = "0"
        try:
            kls["eager"] = evaluate_lens(lm, LogitLens(), batches, precision="bf16").kl
        finally:
            if previous is None:
                del os.environ[COMPILE_ENV]
            else:
                os.environ[COMPILE_ENV] = previous

    def before() -> None:
        kls["before"] = _before(lm, batches)

    load0 = os.getloadavg()
    steps = {
        "head_matmul_bf16": matmul,
        "forward": forward,
        "logit_lens_bf16": lens("bf16"),
        "logit_lens_fp32": lens("fp32"),
        "logit_lens_bf16_eager": eager,
        "logit_lens_before": before,
    }
    full = batches
    batches = [full[0]]  # warm-up on one chunk: buffers, and the compiled row kernels
    warmup: dict[str, float] = {}
    for name, step in steps.items():
        t0 = time.perf_counter()
        step()
        warmup[name] = time.perf_counter() - t0
    batches[:] = full
    times = round_robin(steps, args.reps, warmup=False)
    med = medians(times)
    mins = {k: min(v) for k, v in times.items()}

    def diff(a: str, b: str) -> float:
        return max(abs(x - y) for x, y in zip(kls[a], kls[b], strict=True))

    result = {
        "benchmark": "logit lens of SmolLM2-135M vs its bf16 head products",
        "machine": {
            "cpu": cpu_model(),
            "threads": args.threads,
            "torch": torch.__version__,
            "bf16_native": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
            "loadavg_start": load0,
            "loadavg_end": os.getloadavg(),
            "note": args.note,
        },
        "tokens": n,
        "entries": entries,
        "head_tflop": 2 * entries * n * d * V / 1e12,
        "seconds_median": med,
        "seconds_min": mins,
        "seconds_all": times,
        "warmup_seconds": warmup,
        "ratio": med["logit_lens_bf16"] / med["head_matmul_bf16"],
        "ratio_heads_only": (med["logit_lens_bf16"] - med["forward"]) / med["head_matmul_bf16"],
        "ratio_min": mins["logit_lens_bf16"] / mins["head_matmul_bf16"],
        "speedup_vs_before": med["logit_lens_before"] / med["logit_lens_bf16"],
        "speedup_vs_fp32": med["logit_lens_fp32"] / med["logit_lens_bf16"],
        "speedup_vs_eager": med["logit_lens_bf16_eager"] / med["logit_lens_bf16"],
        "goal_ratio": 2.0,
        "kl_max_abs_diff_bits": {
            "bf16_vs_fp32": diff("bf16", "fp32"),
            "eager_vs_fp32": diff("eager", "fp32"),
            "before_vs_fp32": diff("before", "fp32"),
        },
        "kl_bits_fp32": kls["fp32"],
    }
    write_json(result, args.out)
    print(
        f"ratio {result['ratio']:.2f} (heads only {result['ratio_heads_only']:.2f}), "
        f"vs before {result['speedup_vs_before']:.2f}x, KL diff bf16-fp32 "
        f"{result['kl_max_abs_diff_bits']['bf16_vs_fp32']:.2e} bits",
        flush=True,
    )
    _time_verb(args, result)


def _time_verb(args: argparse.Namespace, result: dict) -> None:
    """Time the verb before and after (fresh processes, one after the other) into `result`."""
    if args.cli_tokens > 0:
        with tempfile.TemporaryDirectory() as tmp:
            verb = {
                "tokens": args.cli_tokens,
                "command": f"tying lens smollm2 --kind logit --max-tokens {args.cli_tokens}",
                "before_seconds": _verb(Path(args.before_src), args.cli_tokens, Path(tmp) / "b"),
                "after_seconds": _verb(ROOT / "src", args.cli_tokens, Path(tmp) / "a"),
            }
            kl = [
                json.loads((Path(tmp) / side / "lens.json").read_text())["models"][0]["kl"]
                for side in ("b", "a")
            ]
        verb["kl_bits_before"], verb["kl_bits_after"] = kl
        verb["kl_max_abs_diff_bits"] = max(abs(x - y) for x, y in zip(*kl, strict=True))
        verb["speedup"] = verb["before_seconds"] / verb["after_seconds"]
        result["verb"] = verb
        result["machine"]["loadavg_end"] = os.getloadavg()
        write_json(result, args.out)
        print(f"verb: before {verb['before_seconds']:.0f} s, after {verb['after_seconds']:.0f} s")


if __name__ == "__main__":
    main()
