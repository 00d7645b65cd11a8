"""Comparing the interface matrices of two models (bias paper, §4.1 and Appendix B).

The four matrices A.input, A.output, B.input, B.output (raw: E and U; effective: s·E and
U diag(g)) are restricted to the tokens both vocabularies share (`match_vocabularies`, by
token string), then compared pair by pair with `alignment`, KNN@k overlap and the spectral
distance (docs/metrics.md §2). For a transpose-tied model the raw input and output are one
matrix: its pairs are reported under both names but computed once, and the pair of a matrix
with itself costs no search (KNN@k overlap 1 and spectral distance 0 by definition).

One cosine KNN@K search per distinct matrix (K = max(k, spectral k)) serves both metrics:
its first k columns are the KNN@k lists, all K columns the spectral kNN graph.

Direction (`paper_direction`): every pair is reported as source → target in the bias paper's
direction (Table 1 reads "Input (U) → Output (U)", "Output (U) → Tied", "Input (U) → Tied"):

1. a matrix of an untied model is mapped onto a matrix of a tied model (TT or PIT);
2. otherwise an input matrix is mapped onto an output matrix;
3. otherwise (same side, both tied or both untied) A's matrix onto B's.

Only the linear alignment depends on it; the KNN overlap and spectral distance, symmetric,
list their pairs in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from tying.analysis import (
    alignment,
    definition_parts,
    knn_graph,
    knn_indices,
    match_vocabularies,
    neighbor_overlap,
    omnibus_distance,
    omnibus_embedding,
)
from tying.errors import InvalidInputError
from tying.probe.matrices import InterfaceMatrices
from tying.probe.stages import Log, quiet_log

#: Which pairs of the four matrices are compared.
PAIR_SETS = ("all", "cross")
#: Names of the four matrices, in order.
MATRIX_NAMES = ("A.input", "A.output", "B.input", "B.output")


def vocab_match(a: InterfaceMatrices, b: InterfaceMatrices) -> tuple[Tensor, Tensor, dict]:
    """Rows of A and B that hold the same token: (idx_a, idx_b, `probe.json["vocab_match"]`).

    By token string when both models have a tokenizer (`match_vocabularies`: a string that
    occurs twice is matched through its lowest id; rows without a token are skipped); by id
    when neither has one and both have V rows (every row matched, "by": "id").

    Raises:
        ValueError: one model lacks a tokenizer, or neither has one and V differs.
    """
    info: dict[str, Any] = {"vocab_a": a.vocab_size, "vocab_b": b.vocab_size}
    if a.tokens is not None and b.tokens is not None:
        idx_a, idx_b, n = match_vocabularies(a.tokens, b.tokens)
        return idx_a, idx_b, {"matched": n, **info, "by": "string"}
    if a.tokens is None and b.tokens is None and a.vocab_size == b.vocab_size:
        idx = torch.arange(a.vocab_size)
        return idx, idx, {"matched": a.vocab_size, **info, "by": "id"}
    missing = "A" if a.tokens is None else "B"
    raise InvalidInputError(
        f"cannot match the vocabularies: model {missing} has no tokenizer (V_A = "
        f"{a.vocab_size}, V_B = {b.vocab_size}); set tokenizer / against_tokenizer"
    )


@dataclass
class NamedMatrices:
    """The four matrices on the shared tokens, with which ones are the same tensor.

    Attributes:
        matrices: name -> (n_matched, d) tensor, names from MATRIX_NAMES.
        key: name -> an id shared by names that denote one matrix (tied raw maps).
        tie: name -> the interface of its model ("untied", "tt" or "pit").
    """

    matrices: dict[str, Tensor]
    key: dict[str, int]
    tie: dict[str, str] = field(default_factory=dict)


def named_matrices(
    a: InterfaceMatrices, b: InterfaceMatrices, idx_a: Tensor, idx_b: Tensor, maps: str
) -> NamedMatrices:
    """A.input, A.output, B.input, B.output (`maps`: "raw" or "effective") on matched rows."""
    matrices: dict[str, Tensor] = {}
    key: dict[str, int] = {}
    tie: dict[str, str] = {}
    for prefix, mats, idx, base in (("A", a, idx_a, 0), ("B", b, idx_b, 2)):
        inp, out = mats.maps(maps)
        same = inp is out
        X = inp[idx]
        matrices[f"{prefix}.input"] = X
        matrices[f"{prefix}.output"] = X if same else out[idx]
        key[f"{prefix}.input"] = base
        key[f"{prefix}.output"] = base if same else base + 1
        tie[f"{prefix}.input"] = tie[f"{prefix}.output"] = mats.tie
    return NamedMatrices(matrices, key, tie)


def pairs_of(pairs: str) -> list[tuple[str, str]]:
    """The (first, second) name pairs of a pair set: "all" (6) or "cross" (A.x vs B.y, 4).

    Raises:
        ValueError: an unknown pair set.
    """
    if pairs not in PAIR_SETS:
        raise ValueError(f"pairs must be one of {PAIR_SETS}, got {pairs!r}")
    out = []
    for i, first in enumerate(MATRIX_NAMES):
        for second in MATRIX_NAMES[i + 1 :]:
            if pairs == "cross" and first[0] == second[0]:
                continue
            out.append((first, second))
    return out


def _is_tied(named: NamedMatrices, name: str) -> bool:
    return named.tie.get(name, "untied") != "untied"


def paper_direction(named: NamedMatrices, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each pair as (source, target) in the bias paper's direction (module docstring): untied
    onto tied, else input onto output, else A onto B. The order of the pairs is kept."""
    out = []
    for first, second in pairs:
        flip = False
        if _is_tied(named, first) != _is_tied(named, second):
            flip = _is_tied(named, first)
        elif first.endswith(".output") and second.endswith(".input"):
            flip = True
        out.append((second, first) if flip else (first, second))
    return out


def pair_label(named: NamedMatrices, source: str, target: str) -> str:
    """ "source → target" with each matrix's model interface, e.g. "B.output (untied) → A.input (tt)"."""
    return f"{source} ({named.tie.get(source, 'untied')}) → {target} ({named.tie.get(target, 'untied')})"


def alignment_block(
    named: NamedMatrices, pairs: list[tuple[str, str]], identity: str = "raw"
) -> dict[str, Any]:
    """`probe.json["alignment"]`: `alignment(source, target, identity=)` for each pair, given
    as (source, target) (see `paper_direction`), with its `label`.

    Pairs that denote the same two matrices as an earlier pair reuse its result.
    """
    done: dict[tuple[int, int], dict[str, Any]] = {}
    rows = []
    for s, t in pairs:
        ids = (named.key[s], named.key[t])
        if ids not in done:
            done[ids] = alignment(named.matrices[s], named.matrices[t], identity=identity)
        rows.append({"source": s, "target": t, "label": pair_label(named, s, t), **done[ids]})
    return {"identity_mode": identity, "n_tokens": _rows(named), "pairs": rows}


def _rows(named: NamedMatrices) -> int:
    return int(next(iter(named.matrices.values())).shape[0])


def neighbour_lists(
    named: NamedMatrices, names: set[str], k: int, log: Log = quiet_log
) -> dict[int, Tensor]:
    """`knn_indices(X, k)` once per distinct matrix among `names`: {matrix key: (n, k) ids}."""
    out: dict[int, Tensor] = {}
    for name in MATRIX_NAMES:
        if name not in names or named.key[name] in out:
            continue
        log(f"KNN@{k} search of {name} ({_rows(named)} tokens)")
        out[named.key[name]] = knn_indices(named.matrices[name], k)
    return out


def knn_block(
    named: NamedMatrices, pairs: list[tuple[str, str]], lists: dict[int, Tensor], k: int
) -> dict[str, Any]:
    """`probe.json["knn_overlap"]`: KNN@k overlap of each pair, from precomputed lists."""
    rows = []
    for a, b in pairs:
        ia, ib = lists[named.key[a]][:, :k], lists[named.key[b]][:, :k]
        rows.append(
            {"a": a, "b": b, "label": pair_label(named, a, b), "overlap": neighbor_overlap(ia, ib)}
        )
    return {"k": k, "n_tokens": _rows(named), "pairs": rows}


def spectral_block(
    named: NamedMatrices,
    pairs: list[tuple[str, str]],
    lists: dict[int, Tensor],
    k: int,
    n_components: int,
    log: Log = quiet_log,
    definition: str = "published",
) -> dict[str, Any]:
    """`probe.json["spectral_distance"]`: spectral distance (`definition`: "published" or
    "union-frobenius") of each pair from the kNN graphs of precomputed KNN lists (first k
    columns); a matrix against itself is 0 without a solve."""
    weights, norm = definition_parts(definition)
    graphs: dict[int, Any] = {}
    done: dict[frozenset[int], float] = {}
    rows = []
    for a, b in pairs:
        ka, kb = named.key[a], named.key[b]
        ids = frozenset((ka, kb))
        if ids not in done:
            if ka == kb:
                done[ids] = 0.0
            else:
                for key in (ka, kb):
                    if key not in graphs:
                        graphs[key] = knn_graph(lists[key][:, :k], weights=weights)
                log(f"omnibus embedding of {a} and {b} ({n_components} components)")
                Z, _ = omnibus_embedding(graphs[ka], graphs[kb], n_components)
                done[ids] = omnibus_distance(Z, norm)
        rows.append({"a": a, "b": b, "label": pair_label(named, a, b), "distance": done[ids]})
    return {
        "definition": definition,
        "k": k,
        "n_components": n_components,
        "n_tokens": _rows(named),
        "pairs": rows,
    }
