"""Benchmark: the bias paper's published metric functions against `tying.analysis`, side by side.

The bias paper's repository (AntonioLopardo/weight-tying-bias) publishes the functions behind
its Table 1 (identity / orthogonal / linear alignment), Table 5 (KNN@10), Appendix B (spectral
distance) and Figure 3 (drift). This script imports them from a checkout of that repository
(`--published DIR`; nothing of it is copied here) and runs them and ours on the same inputs:

- E: SmolLM2-135M-Instruct's token embedding (V = 49,152, d = 576, float32, `load_any`);
- E·diag(g): E times the final RMSNorm gain g (the effective output map of a tied model);
- a rotated noisy copy R = E Q + 0.5 σ N (Q a Haar-random orthogonal d×d matrix, σ the
  standard deviation of E's entries, N standard normal; seeded, `--seed`).

Pairs: (E, E·diag(g)) and (E, R), E as the source of the linear map (and R onto E as well).
Ours are computed with the package's defaults and, where this package's earlier definitions
survive as named options, with those too (`identity="centred"`, `definition="union-frobenius"`).
KNN@10 and the spectral distance run on the full V (no subsampling). ARPACK's start vector is
seeded in ours and random in the published code (it passes none).

Norm against frequency: the published code publishes no coefficient, only scatter plots
(`experiments/4_norm_frequency/plotting_util.plot_figure5_comparison`: L2 row norm against
log10(count + 1) over the tokens with count > 0); its helper module installs packages when
imported, so those points are formed here as that function forms them, and their Spearman ρ
(scipy) is compared with ours over the probe's default corpus (the Gutenberg validation books,
first 200,000 tokens).

Gradient provenance: the published log of the paper's Figure 5 run
(`experiments/5_gradient_flow/.../gradient_provenance.csv`) summarized by the published
`plot_gradient_provenance` (the mean output share of its rolling means over 20 steps) over the
first 1,000 and 10,000 steps.

Usage:
    python benchmarks/bias_paper_agreement.py --published DIR [--published-commit SHA]
        [--threads 2] [--seed 0] [--out benchmarks/results/bias_paper_agreement.json]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor

from timing import cpu_description, write_json

#: Published modules used, relative to the repository's root.
PUBLISHED = {
    "compare_cross_model": "experiments/1_embedding_alignment/compare_cross_model.py",
    "reproduce_figure1": "experiments/1_embedding_alignment/reproduce_figure1.py",
    "reproduce_table5": "experiments/1_embedding_alignment/Appendix_B/reproduce_table5.py",
    "reproduce_spectral_distance": (
        "experiments/1_embedding_alignment/Appendix_B/reproduce_spectral_distance.py"
    ),
    "track_evolution": "experiments/3_embedding_evolution/track_evolution.py",
    "plot_gradient_provenance": "experiments/5_gradient_flow/plot_gradient_provenance.py",
}
#: The gradient-provenance log of the paper's Figure 5 run, published in its repository.
PROVENANCE_LOG = "experiments/5_gradient_flow/OLMo-1B-tied-no-scale-10000/gradient_provenance.csv"
NOISE = 0.5
KNN_K = 10
SPECTRAL_K = 64
N_COMPONENTS = 128
CORPUS_TOKENS = 200_000


def load_published(root: Path) -> dict[str, ModuleType]:
    """The published modules, imported from their files (their `utils` package on sys.path)."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.path.insert(0, str(root))
    modules = {}
    for name, rel in PUBLISHED.items():
        spec = importlib.util.spec_from_file_location(f"published_{name}", root / rel)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[name] = module
    from utils import embedding_utils  # the published repository's package

    modules["embedding_utils"] = embedding_utils
    return modules


def published_commit(root: Path, given: str | None) -> str | None:
    if given:
        return given
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def cache_by_tensor(fn):
    """Memoize a published per-matrix function on (tensor identity, args): the published
    pair functions recompute each matrix's neighbours for every pair; the values are the same."""
    memo: dict[tuple, Any] = {}

    @functools.wraps(fn)
    def wrapper(emb, *args, **kwargs):
        key = (id(emb), args, tuple(sorted(kwargs.items(), key=lambda kv: kv[0])))
        if key not in memo:
            memo[key] = fn(emb, *args, **kwargs)
        return memo[key]

    return wrapper


def inputs(seed: int) -> tuple[dict[str, Tensor], Any, dict[str, Any]]:
    """{"E", "Eg", "R"} float32 (V, d), the tokenizer, and facts about them."""
    from tying.loader import load_any
    from tying.probe.matrices import final_norm_gain

    loaded = load_any("smollm2")
    E = loaded.interface.embedding_matrix().detach().float().contiguous().clone()
    g = final_norm_gain(loaded.model)
    Eg = (E.double() * g).float()
    gen = torch.Generator().manual_seed(seed)
    V, d = E.shape
    Q, Rq = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    Q = Q * torch.sign(torch.diagonal(Rq))  # Haar-distributed
    sigma = float(E.double().std())
    N = torch.randn(V, d, generator=gen, dtype=torch.float64)
    R = (E.double() @ Q + NOISE * sigma * N).float()
    _, inverse, counts = torch.unique(E, dim=0, return_inverse=True, return_counts=True)
    groups = []
    for u in torch.nonzero(counts > 1).flatten().tolist():
        groups.append(torch.nonzero(inverse == u).flatten().tolist())
    groups.sort()
    facts = {
        "V": V,
        "d": d,
        "sigma_E": sigma,
        "duplicate_row_groups": groups,
        "duplicate_group_sizes": sorted(len(x) for x in groups),
    }
    return {"E": E, "Eg": Eg, "R": R}, loaded.tokenizer, facts


def _holds_lowest(lists: Tensor, candidates: Tensor) -> bool:
    """Whether each row of `lists` that holds c of `candidates` (sorted) holds the first c."""
    held = torch.isin(lists, candidates).sum(dim=1)
    for c in range(1, candidates.numel() + 1):
        rows = held == c
        if rows.any() and not bool((torch.isin(lists[rows], candidates[:c]).sum(dim=1) == c).all()):
            return False
    return True


def lowest_copies_first(lists: Tensor, groups: list[list[int]]) -> bool:
    """Whether every neighbour list that holds c members of a group of identical rows holds
    the c lowest-index members of the group (a member's own row left out of its group)."""
    V = lists.shape[0]
    for group in groups:
        members = torch.tensor([m for m in group if m < V], dtype=lists.dtype)
        outside = torch.ones(V, dtype=torch.bool)
        outside[members] = False
        if not _holds_lowest(lists[outside], members):
            return False
        for m in members.tolist():
            if not _holds_lowest(lists[m : m + 1], members[members != m]):
                return False
    return True


def provenance_share(pub: dict[str, ModuleType], root: Path, max_steps: int) -> float:
    """The "Output Projection" average percentage that the published
    `plot_gradient_provenance` prints for the published log's first `max_steps` steps."""
    out = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(out):
        pub["plot_gradient_provenance"].plot_gradient_provenance(
            str(root / PROVENANCE_LOG), str(Path(tmp) / "plot.png"), max_steps=max_steps
        )
    match = re.search(r"Output Projection: ([0-9.]+)%", out.getvalue())
    if match is None:
        raise RuntimeError("the published plot_gradient_provenance printed no output share")
    return float(match.group(1))


class Clock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str, fn, *args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
        print(f"  {name}: {time.perf_counter() - t0:.1f} s", flush=True)
        return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--published", required=True, type=Path, help="checkout of the published repo")
    p.add_argument("--published-commit", default=None, help="its commit (default: git rev-parse)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows", type=int, default=None, help="first N tokens only (a smoke test)")
    p.add_argument("--out", default="benchmarks/results/bias_paper_agreement.json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()
    t_start = time.perf_counter()

    from tying.analysis import (
        alignment,
        drift,
        knn_graph,
        knn_indices,
        neighbor_overlap,
        norm_frequency,
        omnibus_distance,
        omnibus_embedding,
        row_cosine,
    )
    from tying.analysis.alignment import centred
    from tying.data.corpus import default_validation_source
    from tying.probe.corpus import corpus_token_counts

    pub = load_published(args.published)
    t5 = pub["reproduce_table5"]
    sd = pub["reproduce_spectral_distance"]
    t5.knn_at_k = cache_by_tensor(t5.knn_at_k)
    sd.build_knn_adj = cache_by_tensor(sd.build_knn_adj)

    clock = Clock()
    mats, tokenizer, facts = clock("load", inputs, args.seed)
    if args.rows:
        mats = {n: X[: args.rows].contiguous() for n, X in mats.items()}
        facts["rows_used"] = args.rows
    E = mats["E"]
    pairs = {"E_Eg": ("E", "Eg"), "E_R": ("E", "R")}
    result: dict[str, Any] = {
        "benchmark": "bias paper's published functions against tying.analysis",
        "published": {
            "repository": "AntonioLopardo/weight-tying-bias",
            "commit": published_commit(args.published, args.published_commit),
            "functions": {
                "identity": "compare_cross_model.compute_similarity_stats (cos_sim_mean)",
                "orthogonal": "utils/embedding_utils.procrustes_cosine_similarity",
                "linear": "reproduce_figure1.align_and_compute_cosine (mean)",
                "knn": "Appendix_B/reproduce_table5.knn_overlap",
                "spectral": "Appendix_B/reproduce_spectral_distance.spectral_distance",
                "drift": "3_embedding_evolution/track_evolution.compute_mean_cosine_similarity",
            },
        },
        "inputs": {
            "model": "smollm2 (SmolLM2-135M-Instruct, GGUF Q8_0 embedding)",
            "noise": NOISE,
            "seed": args.seed,
            **facts,
        },
        "settings": {"knn_k": KNN_K, "spectral_k": SPECTRAL_K, "n_components": N_COMPONENTS},
    }

    # Alignment (identity, orthogonal, linear), each pair, source -> target.
    directions = {"E_Eg": ("E", "Eg"), "E_R": ("E", "R"), "R_E": ("R", "E")}
    align: dict[str, Any] = {}
    for label, (s, t) in directions.items():
        S, T = mats[s], mats[t]
        ours = clock("ours_alignment", alignment, S, T)
        # identity="centred" changes only the identity score: its formula, without refitting
        # the maps (`alignment(S, T, identity="centred")["identity"]`).
        centred_identity = clock(
            "ours_alignment", lambda S=S, T=T: float(row_cosine(centred(S), centred(T)).mean())
        )
        stats = clock(
            "published_alignment", pub["compare_cross_model"].compute_similarity_stats, S, T, s, t
        )
        orth = clock(
            "published_alignment", pub["embedding_utils"].procrustes_cosine_similarity, S, T
        )
        lin = clock(
            "published_alignment",
            pub["reproduce_figure1"].align_and_compute_cosine,
            S.numpy(),
            T.numpy(),
        )
        align[label] = {
            "source": s,
            "target": t,
            "ours": ours,
            "ours_identity_centred": centred_identity,
            "published": {
                "identity": stats["cos_sim_mean"],
                "orthogonal": orth,
                "linear": float(np.mean(lin)),
            },
        }
    result["alignment"] = align

    # Neighbour lists: ours once per matrix (KNN@64, whose first 10 columns are KNN@10), plus
    # one KNN@10 search per matrix to check that equality; the published ones (cached per
    # matrix) through their pair functions.
    ours64 = {n: clock("ours_knn64", knn_indices, X, SPECTRAL_K) for n, X in mats.items()}
    ours10 = {n: clock("ours_knn10", knn_indices, X, KNN_K) for n, X in mats.items()}
    knn: dict[str, Any] = {}
    for label, (a, b) in pairs.items():
        published = clock("published_knn10", t5.knn_overlap, mats[a], mats[b], KNN_K)
        knn[label] = {
            "ours": neighbor_overlap(ours10[a], ours10[b]),
            "ours_from_knn64_lists": neighbor_overlap(ours64[a][:, :KNN_K], ours64[b][:, :KNN_K]),
            "published": published,
        }
    knn["first_columns_equal_knn10"] = {
        n: bool(torch.equal(ours64[n][:, :KNN_K], ours10[n])) for n in mats
    }
    knn["rows_whose_published_set_differs"] = {
        n: int(
            (
                torch.sort(t5.knn_at_k(mats[n], KNN_K), dim=1).values
                != torch.sort(ours10[n], dim=1).values
            )
            .any(dim=1)
            .sum()
        )
        for n in mats
    }
    groups = facts["duplicate_row_groups"]
    knn["lowest_copies_first"] = {
        f"{n}_k{k}": lowest_copies_first(lists[n], groups)
        for k, lists in ((KNN_K, ours10), (SPECTRAL_K, ours64))
        for n in ("E", "Eg")
    }
    result["knn_overlap"] = knn

    # Spectral distance: ours (published definition, and the union-frobenius option) from the
    # KNN@64 lists; the published function on the raw matrices.
    spectral: dict[str, Any] = {}
    for label, (a, b) in pairs.items():
        V = mats[a].shape[0]
        Z, _ = clock(
            "ours_spectral_eigsh",
            omnibus_embedding,
            knn_graph(ours64[a], V),
            knn_graph(ours64[b], V),
            N_COMPONENTS,
        )
        Zu, _ = clock(
            "ours_spectral_eigsh_union",
            omnibus_embedding,
            knn_graph(ours64[a], V, weights="binary"),
            knn_graph(ours64[b], V, weights="binary"),
            N_COMPONENTS,
        )
        published = clock(
            "published_spectral", sd.spectral_distance, mats[a], mats[b], SPECTRAL_K, N_COMPONENTS
        )
        spectral[label] = {
            "ours": omnibus_distance(Z),
            "ours_union_frobenius": omnibus_distance(Zu, "frobenius"),
            "published": published,
        }
    result["spectral_distance"] = spectral

    # Drift over the sequence [E, E·diag(g), R] (as if they were three checkpoints).
    seq = [mats["E"], mats["Eg"], mats["R"]]
    ours_drift = drift(seq)
    cos = pub["track_evolution"].compute_mean_cosine_similarity
    result["drift"] = {
        "sequence": ["E", "Eg", "R"],
        "ours": {"to_first": ours_drift["to_first"], "to_previous": ours_drift["to_previous"]},
        "published": {
            "to_first": [cos(seq[t], seq[0]) for t in (1, 2)],
            "consecutive": [cos(seq[t], seq[t - 1]) for t in (1, 2)],
        },
    }

    # Norm against frequency.
    from scipy.stats import spearmanr

    counts, info = clock(
        "corpus",
        corpus_token_counts,
        default_validation_source(),
        tokenizer,
        facts["V"],
        CORPUS_TOKENS,
    )
    counts = counts[: E.shape[0]]
    nf: dict[str, Any] = {
        "corpus_tokens": info["tokens"],
        "distinct_tokens": int((counts > 0).sum()),
    }
    for name in ("E", "Eg"):
        ours = norm_frequency(mats[name], counts)
        mask = counts > 0
        x = torch.log10(counts[mask].float() + 1.0).numpy()
        y = torch.linalg.vector_norm(mats[name], ord=2, dim=1)[mask].numpy()
        nf[name] = {
            "ours": ours["spearman_rho"],
            "n_tokens": ours["n_tokens"],
            "published_points": float(spearmanr(x, y).statistic),
        }
    result["norm_frequency"] = nf

    # The published log of the Figure 5 run, summarized by the published plotting function
    # (it prints the mean output share of the rolling means, window 20, up to max_steps).
    result["gradient_provenance_log"] = {
        "csv": PROVENANCE_LOG,
        "window": 20,
        **{
            f"output_share_percent_first_{n}_steps": provenance_share(pub, args.published, n)
            for n in (1000, 10000)
        },
    }

    # The largest |ours − published| of each family (the agreement the page states).
    def gap(pairs_):
        return max(abs(float(o) - float(q)) for o, q in pairs_)

    result["max_abs_difference"] = {
        "identity": gap(
            (align[k]["ours"]["identity"], align[k]["published"]["identity"]) for k in align
        ),
        "orthogonal_linear": gap(
            (align[k]["ours"][m], align[k]["published"][m])
            for k in align
            for m in ("orthogonal", "linear")
        ),
        "drift": gap(
            list(zip(ours_drift["to_first"][1:], result["drift"]["published"]["to_first"]))
            + list(zip(ours_drift["to_previous"], result["drift"]["published"]["consecutive"]))
        ),
        "norm_frequency": gap((nf[n]["ours"], nf[n]["published_points"]) for n in ("E", "Eg")),
        "knn": gap((knn[k]["ours"], knn[k]["published"]) for k in pairs),
        "spectral": gap((spectral[k]["ours"], spectral[k]["published"]) for k in pairs),
    }
    result["seconds"] = {k: round(v, 2) for k, v in clock.seconds.items()}
    result["seconds"]["total"] = round(time.perf_counter() - t_start, 2)
    result["machine"] = {
        "cpu": cpu_description(),
        "cores": os.cpu_count(),
        "threads": args.threads,
        "torch": torch.__version__,
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
    }
    write_json(result, args.out)


if __name__ == "__main__":
    main()
