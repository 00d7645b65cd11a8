"""Benchmark: training tokens/s of our `mini` decoder against transformers' LlamaForCausalLM.

Both models get the same width, depth, heads, key/value heads, MLP width and
vocabulary, tied embeddings, the same batch, bf16 autocast, one process, and the same
step: `tying.train.loop.train_step` on a run built as `tying train` builds one
(`benchmarks/steps.py`: the run's AdamW groups, clipping, the step's one host sync);
transformers' model computes its own loss (full logits, upcast to fp32, labels shifted
inside). Steps of the variants are alternated in one run (round-robin) and the median is
kept, so the ratios compare steps taken under the same machine load.

Also reported:
- model FLOP utilisation (MFU): 6·N·tokens + 12·L·T·d·tokens FLOPs per step
  (N = parameters in matrix products, the head counted once) over the peak
  bf16 matmul rate measured in the same run (a 2048³ product);
- the PIT/TT step-time ratio on `mini` (PIT with frozen Z).

Usage:
    python benchmarks/train_throughput.py [--quick] [--out benchmarks/results/train_throughput.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch

from steps import project_step, train_config
from timing import medians, round_robin, write_json
from tying.train.build import build_model


def matmul_peak_flops(n: int = 2048, reps: int = 5) -> float:
    """Measured bf16 matmul FLOP/s (n×n by n×n)."""
    a = torch.randn(n, n, dtype=torch.bfloat16)
    b = torch.randn(n, n, dtype=torch.bfloat16)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def hf_llama(cfg) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_cfg = LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_seq_len,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(hf_cfg)


def make_step(
    model: torch.nn.Module, cfg, x: torch.Tensor, y: torch.Tensor, hf: bool = False
) -> Callable[[], float]:
    """`tying.train.loop.train_step` of `model` on the one micro-batch (x, y); returns the loss.

    A transformers model goes through the same step with its own loss path (full logits,
    upcast to fp32, labels shifted inside) as the step's forward."""
    forward = (lambda inputs, _targets: model(input_ids=inputs, labels=inputs).loss) if hf else None
    step = project_step(model, cfg, [(x, y)], forward=forward)

    def run() -> float:
        return step().loss

    return run


def run_config(preset: str, tie: str, seq_len: int):
    """The `TrainConfig` of a timed run: bf16 autocast, eager (the CPU default), PIT's Z frozen."""
    overrides = [f"preset={preset}", f"tie={tie}", f"seq_len={seq_len}", "precision=bf16"]
    overrides += ["compile=false"] + (["pit.trainable_z=false"] if tie == "pit" else [])
    return train_config(overrides)


def step_flops(cfg, tokens: int, seq_len: int) -> float:
    """6·N·tokens + 12·L·T·d·tokens, N = matrix-product parameters (blocks + head once)."""
    d, L = cfg.d_model, cfg.n_layers
    kv = cfg.n_kv_heads * cfg.head_dim
    per_layer = d * (cfg.n_heads * cfg.head_dim) * 2 + 2 * d * kv + 3 * d * cfg.d_ff
    n_matmul = L * per_layer + cfg.vocab_size * d
    return 6 * n_matmul * tokens + 12 * L * seq_len * d * tokens


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny preset, 2 reps (smoke run)")
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "train_throughput.json")
    )
    args = parser.parse_args()
    if args.quick:
        args.preset, args.reps, args.batch, args.seq_len = "tiny", 2, 2, 64

    torch.manual_seed(0)
    run_tt = run_config(args.preset, "tt", args.seq_len)
    run_pit = run_config(args.preset, "pit", args.seq_len)
    ours_tt = build_model(run_tt, args.vocab)
    cfg_tt = ours_tt.config
    x = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    y = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    variants = {
        "ours_tt": make_step(ours_tt, run_tt, x, y),
        "hf_llama_tied": make_step(hf_llama(cfg_tt), run_tt, x, y, hf=True),
        "ours_pit": make_step(build_model(run_pit, args.vocab), run_pit, x, y),
    }
    times = round_robin(variants, args.reps)
    peak = matmul_peak_flops()
    tokens = args.batch * args.seq_len
    flops = step_flops(cfg_tt, tokens, args.seq_len)
    median = medians(times)
    result = {
        "benchmark": "training throughput",
        "preset": args.preset,
        "shape": {
            "vocab": args.vocab,
            "batch": args.batch,
            "seq_len": args.seq_len,
            "tokens_per_step": tokens,
        },
        "machine": {
            "platform": platform.platform(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
        "step_time_s": {k: {"median": median[k], "all": times[k]} for k in times},
        "tokens_per_s": {k: tokens / median[k] for k in median},
        "ratios": {
            "ours_over_hf_tokens_per_s": median["hf_llama_tied"] / median["ours_tt"],
            "pit_over_tt_step_time": median["ours_pit"] / median["ours_tt"],
        },
        "mfu": {
            "matmul_peak_bf16_flops": peak,
            "step_flops": flops,
            "ours_tt": flops / median["ours_tt"] / peak,
            "hf_llama_tied": flops / median["hf_llama_tied"] / peak,
        },
    }
    print(
        json.dumps(
            {
                "ratios": result["ratios"],
                "mfu": result["mfu"],
                "tokens_per_s": result["tokens_per_s"],
            },
            indent=2,
        )
    )
    write_json(result, args.out)


if __name__ == "__main__":
    main()
