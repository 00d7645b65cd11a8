"""Benchmark: the probe's analysis metrics at SmolLM2-135M sizes (V = 49,152, d = 576).

Times, in one process and one run:

- `consistency(E, U, final_norm_gain, embed_scale)` (raw + effective);
- `knn_overlap(A, B, k=10)` (two exact float32 KNN@10 searches);
- `spectral_distance(A, B, k=64, n_components=128)`, as its parts (two KNN@64 searches, the
  two kNN graphs, the omnibus eigenproblem, the distance);
- a straightforward numpy KNN@10 of one matrix (float32 similarity rows in blocks,
  `argpartition`), on a subset of rows and extrapolated linearly in the number of rows
  (each row costs V·d multiply-adds, so the full search costs V/rows times the subset),
  for both matrices, so that the KNN@10 speed-up is a ratio measured in the same run.

Data: random low-rank + noise matrices (a latent r-dimensional token code, mapped to d
dimensions, plus isotropic noise), so that the kNN graphs have realistic neighbourhoods:
A = Z W_a + σ N_a and B = Z W_b + σ N_b share the latent code Z but not the maps.

Targets (2 cores): consistency <= 5 s, KNN@10 overlap <= 15 s, spectral distance <= 60 s.
The machine's load average is recorded: timings on a shared machine are upper bounds.

Usage:
    python benchmarks/probe_metrics.py [--quick] [--threads 2] [--out benchmarks/results/probe_metrics.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")  # numpy's BLAS in the baseline: 2 cores too

import numpy as np
import torch

from tying.analysis import (
    consistency,
    knn_graph,
    knn_indices,
    knn_overlap,
    omnibus_distance,
    omnibus_embedding,
)
from tying.analysis.neighbors import onednn_available

TARGETS_S = {"consistency": 5.0, "knn_overlap": 15.0, "spectral_distance": 60.0}


def make_matrices(V: int, d: int, rank: int = 64, noise: float = 0.5, seed: int = 0):
    """E, U (an untied-looking pair), a final-norm gain g; A = E, B = U for the comparisons."""
    g = torch.Generator().manual_seed(seed)
    Z = torch.randn(V, rank, generator=g)
    E = Z @ torch.randn(rank, d, generator=g) + noise * torch.randn(V, d, generator=g)
    U = Z @ torch.randn(rank, d, generator=g) + noise * torch.randn(V, d, generator=g)
    gain = 0.5 + torch.rand(d, generator=g)
    scale = (rank * d + noise**2 * d) ** -0.5  # rows of norm about 1
    return E * scale, U * scale, gain


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def naive_knn_rows(X: np.ndarray, rows: int, k: int = 10, block: int = 1024) -> float:
    """Seconds for a plain numpy KNN@k of the first `rows` rows of X against all rows."""
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    start = time.perf_counter()
    for s in range(0, rows, block):
        e = min(s + block, rows)
        S = Xn[s:e] @ Xn.T
        S[np.arange(e - s), np.arange(s, e)] = -np.inf
        np.argpartition(-S, k, axis=1)[:, :k]
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--d-model", type=int, default=576)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--naive-rows", type=int, default=4096, help="rows timed in the baseline")
    parser.add_argument("--quick", action="store_true", help="V = 6,000: a smoke test")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/probe_metrics.json"))
    args = parser.parse_args()
    V = 6000 if args.quick else args.vocab
    d = args.d_model
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()

    E, U, gain = make_matrices(V, d)
    # Warm-up on a small slice (library initialization, the oneDNN check).
    consistency(E[:2000], U[:2000], gain, 1.5)
    knn_indices(E[:2000], 10)

    result, t_cons = timed(consistency, E, U, gain, 1.5)
    overlap, t_knn = timed(knn_overlap, E, U, 10)

    idx_a, t_knn64_a = timed(knn_indices, E, 64)
    idx_b, t_knn64_b = timed(knn_indices, U, 64)
    (ga, gb), t_graphs = timed(lambda: (knn_graph(idx_a), knn_graph(idx_b)))
    (Z, lam), t_eig = timed(omnibus_embedding, ga, gb, 128, seed=0)
    dist, t_dist = timed(omnibus_distance, Z)
    t_spectral = t_knn64_a + t_knn64_b + t_graphs + t_eig + t_dist

    rows = min(args.naive_rows, V)
    t_naive_a = naive_knn_rows(E.numpy(), rows)
    t_naive_b = naive_knn_rows(U.numpy(), rows)
    t_naive = (t_naive_a + t_naive_b) * V / rows

    timings = {
        "consistency": t_cons,
        "knn_overlap": t_knn,
        "spectral_distance": t_spectral,
    }
    report = {
        "benchmark": "probe_metrics",
        "shape": {"V": V, "d": d},
        "data": "low-rank (r=64) + noise (0.5), A = E, B = U sharing the latent code",
        "threads": args.threads,
        "seconds": {k: round(v, 3) for k, v in timings.items()},
        "targets_seconds": TARGETS_S,
        "meets_target": {k: timings[k] <= TARGETS_S[k] for k in timings},
        "spectral_parts_seconds": {
            "knn64_a": round(t_knn64_a, 3),
            "knn64_b": round(t_knn64_b, 3),
            "graphs": round(t_graphs, 3),
            "eigsh": round(t_eig, 3),
            "distance": round(t_dist, 3),
        },
        "naive_numpy_knn10_overlap": {
            "seconds_extrapolated": round(t_naive, 3),
            "rows_timed_per_matrix": rows,
            "seconds_timed": round(t_naive_a + t_naive_b, 3),
            "extrapolation": "linear in rows: measured on `rows` query rows of each matrix "
            "against all V rows, times V / rows (the search costs V·d per query row)",
            "speedup_of_knn_overlap": round(t_naive / t_knn, 2),
        },
        "values": {
            "knn_overlap": overlap,
            "spectral_distance": dist,
            "consistency": result,
            "top_omnibus_eigenvalues": [round(float(x), 4) for x in lam[:5]],
        },
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "cpu_count": os.cpu_count(),
            "onednn_float32_matmul": onednn_available(),
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    json.dump(
        {"seconds": report["seconds"], "naive": report["naive_numpy_knn10_overlap"]},
        sys.stdout,
        indent=2,
    )
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
