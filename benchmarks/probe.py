"""Benchmark: the stages of `tying probe` on SmolLM2-135M (V = 49,152, d = 576), 2 threads.

Times, in one run:

- `consistency`: the probe's consistency block on SmolLM2's (E, U = E, final RMSNorm gain),
  raw + effective (target <= 5 s);
- `knn_overlap`: KNN@10 overlap of SmolLM2's E against the E of its PIT conversion
  (`tying.hf.convert(model, "pit")`: E_pit = Z T^{-1}, a different, realistic matrix),
  two exact KNN@10 searches (target <= 15 s);
- `spectral_distance`: spectral distance of the same two matrices (k = 64, 128 components),
  as its parts: two KNN@64 searches, the kNN graphs, the omnibus eigenproblem (target <= 60 s);
- `probe_smollm2`: the whole `tying probe smollm2 --out DIR` (no --against) in a fresh
  process, loading included (target <= 30 s), with its own per-stage `timings_s`;
- for comparison on a shared machine, the consistency block and the whole probe again on one
  thread (`one_thread_seconds`).

The machine's load average is recorded: on a shared machine the wall times are upper bounds.

Usage:
    python benchmarks/probe.py [--threads 2] [--out benchmarks/results/probe.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from timing import write_json

TARGETS_S = {
    "consistency": 5.0,
    "knn_overlap": 15.0,
    "spectral_distance": 60.0,
    "probe_smollm2": 30.0,
}

#: Runs `tying probe` through the verb module (works before and after cli.py lists the verb).
_PROBE_SCRIPT = (
    "import argparse, sys\n"
    "from tying.commands import probe\n"
    "p = argparse.ArgumentParser(prog='tying probe')\n"
    "probe.add_arguments(p)\n"
    "sys.exit(probe.run(p.parse_args(sys.argv[1:])))\n"
)


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def pit_embedding() -> torch.Tensor:
    """E of SmolLM2 converted to pseudo-inverse tying (the default t_init), float32 (V, d)."""
    from tying.hf import convert, interface_of, load

    model, tokenizer = load("smollm2")
    convert(model, "pit", tokenizer=tokenizer)
    with torch.no_grad():
        E = interface_of(model).embedding_matrix().detach().float().clone()
    del model
    return E


def whole_probe(threads: int) -> tuple[float, dict]:
    """Wall seconds of `tying probe smollm2 --threads N` in a fresh process, and its
    probe.json timings."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    args = ["smollm2", "--quiet", "--threads", str(threads)]
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE_SCRIPT, *args, "--out", out],
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"tying probe smollm2 failed ({proc.returncode}):\n{proc.stderr}")
        report = json.loads((Path(out) / "probe.json").read_text())
    return seconds, report["timings_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/probe.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()

    from tying.analysis import (
        knn_graph,
        knn_indices,
        neighbor_overlap,
        omnibus_distance,
        omnibus_embedding,
    )
    from tying.loader import load_any
    from tying.probe import interface_matrices
    from tying.probe.views import consistency_view

    # The whole probe first, in its own process (nothing of this one is warm yet either).
    t_probe, probe_stages = whole_probe(args.threads)
    t_probe_1, probe_stages_1 = whole_probe(1)

    loaded, t_load = timed(load_any, "smollm2")
    mats = interface_matrices(loaded)
    E = mats.E
    E_pit, t_convert = timed(pit_embedding)
    # Warm-up on a slice (library initialization, the oneDNN check).
    knn_indices(E[:2000], 10)

    cons, t_cons = timed(consistency_view, mats)
    # For comparison on a shared machine: the same block on one thread (threaded LAPACK on the
    # d×d decompositions waits for time slices when the cores are oversubscribed).
    torch.set_num_threads(1)
    _, t_cons_1 = timed(consistency_view, mats)
    torch.set_num_threads(args.threads)

    idx_a, t_knn10_a = timed(knn_indices, E, 10)
    idx_b, t_knn10_b = timed(knn_indices, E_pit, 10)
    overlap, t_overlap = timed(neighbor_overlap, idx_a, idx_b)
    t_knn = t_knn10_a + t_knn10_b + t_overlap

    k64_a, t_knn64_a = timed(knn_indices, E, 64)
    k64_b, t_knn64_b = timed(knn_indices, E_pit, 64)
    (ga, gb), t_graphs = timed(lambda: (knn_graph(k64_a), knn_graph(k64_b)))
    (Z, lam), t_eig = timed(omnibus_embedding, ga, gb, 128, seed=0)
    dist, t_dist = timed(omnibus_distance, Z)
    t_spectral = t_knn64_a + t_knn64_b + t_graphs + t_eig + t_dist
    # What the probe does with --against: one KNN@64 search per matrix serves both metrics.
    overlap_from_64 = neighbor_overlap(k64_a[:, :10], k64_b[:, :10])

    timings = {
        "consistency": t_cons,
        "knn_overlap": t_knn,
        "spectral_distance": t_spectral,
        "probe_smollm2": t_probe,
    }
    report = {
        "benchmark": "probe",
        "model": "SmolLM2-135M-Instruct (GGUF, Q8_0 embedding), tied",
        "shape": {"V": mats.vocab_size, "d": mats.d_model},
        "second_matrix": "E of the PIT conversion of SmolLM2 (tying.hf.convert, default t_init)",
        "threads": args.threads,
        "seconds": {k: round(v, 3) for k, v in timings.items()},
        "targets_seconds": TARGETS_S,
        "meets_target": {k: timings[k] <= TARGETS_S[k] for k in timings},
        "parts_seconds": {
            "load_smollm2": round(t_load, 3),
            "pit_conversion": round(t_convert, 3),
            "knn10_E": round(t_knn10_a, 3),
            "knn10_E_pit": round(t_knn10_b, 3),
            "knn64_E": round(t_knn64_a, 3),
            "knn64_E_pit": round(t_knn64_b, 3),
            "graphs": round(t_graphs, 3),
            "eigsh": round(t_eig, 3),
            "distance": round(t_dist, 3),
        },
        "probe_smollm2_stages_seconds": probe_stages,
        "one_thread_seconds": {
            "consistency": round(t_cons_1, 3),
            "probe_smollm2": round(t_probe_1, 3),
            "probe_smollm2_stages": probe_stages_1,
        },
        "values": {
            "consistency": cons,
            "knn10_overlap_E_vs_E_pit": overlap,
            "knn10_overlap_from_knn64_lists": overlap_from_64,
            "spectral_distance_E_vs_E_pit": dist,
            "top_omnibus_eigenvalues": [round(float(x), 4) for x in lam[:5]],
        },
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpu_count": os.cpu_count(),
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
        },
    }
    write_json(report, args.out)
    json.dump(
        {"seconds": report["seconds"], "parts": report["parts_seconds"]}, sys.stdout, indent=2
    )
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
