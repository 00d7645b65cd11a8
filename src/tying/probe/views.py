"""The single-model blocks of probe.json, each a thin composition of `tying.analysis`.

    consistency     consistency(E, U, g, s): {"raw": {...}, "effective": {...}}
    params          params_summary(total, embedding, V, d, tie)
    spectra         singular values of E and U
    norm_frequency  norm_frequency(E | U, token_counts(corpus))
    drift           drift([E_0, ..., E_n]) and drift([U_0, ..., U_n]) over a run's checkpoints

Units are those of docs/metrics.md; the singular values are in the units of the matrices'
entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from tying.analysis import consistency, drift, norm_frequency, params_summary
from tying.probe.matrices import InterfaceMatrices


def consistency_view(mats: InterfaceMatrices) -> dict[str, dict[str, float]]:
    """`probe.json["consistency"]`: `consistency(E, U, final_norm_gain=g, embed_scale=s)`."""
    return consistency(mats.E, mats.U, final_norm_gain=mats.gain, embed_scale=mats.scale)


def params_view(total: int, embedding: int, mats: InterfaceMatrices) -> dict[str, Any]:
    """`probe.json["params"]`: `params_summary` of the measured counts (bias paper, App. A)."""
    return params_summary(
        total, embedding, vocab_size=mats.vocab_size, d_model=mats.d_model, tie=mats.tie
    )


@contextmanager
def single_threaded() -> Iterator[None]:
    """torch (and its LAPACK) on one thread inside the block, restored afterwards.

    For d×d decompositions: milliseconds of work on one thread, but threaded LAPACK
    synchronizes at every step, and on a busy machine (more runnable threads than cores) each
    synchronization can wait for a time slice: a 256×256 `eigvalsh` measured 4 s on 2 threads
    against 3 ms on one.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def singular_values(X: Tensor) -> Tensor:
    """σ_1 ≥ ... ≥ σ_d of a (V, d) matrix, V ≥ d, float64.

    σ_i = sqrt(λ_i(XᵀX)) from a float64 symmetric eigendecomposition of the d×d Gram matrix
    (no SVD of the V×d matrix; the d×d eigenproblem on one thread, see `single_threaded`);
    values below about 1e-8·σ_1 are not resolved (the Gram matrix's eigenvalues carry an
    absolute error of about eps·σ_1²).
    """
    X64 = X.detach().to(torch.float64)
    gram = X64.T @ X64
    with single_threaded():
        lam = torch.linalg.eigvalsh(gram).clamp_min(0.0)
    return lam.flip(0).sqrt()


def spectrum_summary(s: Tensor) -> dict[str, Any]:
    """{"max", "min", "condition_number", "singular_values"} of decreasing singular values."""
    smax, smin = float(s[0]), float(s[-1])
    return {
        "max": smax,
        "min": smin,
        "condition_number": smax / smin if smin > 0 else float("inf"),
        "singular_values": [float(v) for v in s],
    }


def spectra_view(mats: InterfaceMatrices) -> dict[str, dict[str, Any]]:
    """`probe.json["spectra"]`: singular values of E and U (raw; for TT the same matrix)."""
    sE = spectrum_summary(singular_values(mats.E))
    sU = sE if mats.U is mats.E else spectrum_summary(singular_values(mats.U))
    return {"E": sE, "U": sU}


def norm_frequency_view(
    mats: InterfaceMatrices, counts: Tensor, min_count: int = 1
) -> tuple[dict[str, Any], dict[str, dict[str, Tensor]]]:
    """`probe.json["norm_frequency"]` for E and U, and the per-token points for the plot.

    Returns:
        ({"E": {...}, "U": {...}} of `norm_frequency` results without points,
        {"E": points, "U": points}).
    """
    block: dict[str, Any] = {}
    points: dict[str, dict[str, Tensor]] = {}
    for label, X in (("E", mats.E), ("U", mats.U)):
        result = norm_frequency(X, counts, min_count=min_count, return_points=True)
        points[label] = result.pop("points")
        block[label] = result
    return block, points


def drift_view(checkpoints: Iterable[tuple[int, Tensor, Tensor]]) -> dict[str, Any]:
    """`probe.json["drift"]`: `drift` of E and of U over (step, E, U) checkpoints in order.

    Returns:
        {"steps": [...], "E": drift(E_0..E_n), "U": drift(U_0..U_n)}.
    """
    steps: list[int] = []
    Es: list[Tensor] = []
    Us: list[Tensor] = []
    for step, E, U in checkpoints:
        steps.append(step)
        Es.append(E)
        Us.append(U)
    return {"steps": steps, "E": drift(Es), "U": drift(Us)}
