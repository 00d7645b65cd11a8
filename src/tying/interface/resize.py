"""Growing a token interface by k new rows (new tokens), each the mean of existing rows.

    grown = grow_interface(interface, sources, pit_keep="input")
    grown.interface            # V + k rows; rows 0..V-1 are the old tokens
    grown.details              # what moved (PIT: the change of T, of the old rows)

`sources[i]` lists the old ids whose rows the new token i averages (all V ids: transformers'
`resize_token_embeddings(mean_resizing=True)` without its N(0, 1e-9·Σ) noise; the pieces the
old tokenizer splits the string into: the `subwords` init).

- untied: E_new = mean(E[S]), U_new = mean(U[S]); the old rows are untouched.
- TT: the one matrix's new row is mean(W[S]); input and output stay one tensor.
- output bias (any tie): b_new = mean(b[S]).
- PIT (E = Z T^{-1}, U = Z T, Z^T Z = I_d): the new memory row is n = mean(Z[S]), which gives
  mean(E[S]) and mean(U[S]) at once under the old T. Appending n breaks Z^T Z = I_d; the old
  rows become Z A and T becomes T' with

      A^T A = C := I_d − N^T N                         (Z'^T Z' = I_d, N the k×d new rows)

  so W_out' E' = I_d holds exactly. `pit_keep` picks the side kept exactly:

      "input":  T' = T (T^{-1} C T^{-1})^{1/2} T,  A = T^{-1} T'   ->  E_old' = E_old exactly
      "output": T' = T (T C T)^{-1/2} T,           A = T T'^{-1}   ->  U_old' = U_old exactly
      "naive":  Z' = polar([Z; N]), T' = T                          (the reference: both move)

  Both old sides cannot be kept: Σ_v e_v u_v^T = E^T U = I_d over the old rows before the
  resize, and over old + new rows after it, so the old rows give up exactly the new rows'
  share T'^{-1} N^T N T', which is zero only if N = 0 (derivation: docs/interface.md).
  A centred memory (input bias b, Z^T 1 = 0) is kept centred: every row of Z' is shifted by
  μ = 1^T N / (V + k) (C gains + (V+k) μ^T μ), which shifts every logit by the same μ T' h
  (softmax-invariant), and b' = b + μ T'^{-1} keeps the input rows.

Everything is computed in float64 and cast back to the interface's dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from tying.interface.base import TokenInterface
from tying.interface.linalg import polar_retraction

PitKeep = Literal["input", "output", "naive"]
PIT_KEEPS = ("input", "output", "naive")


@dataclass
class GrownInterface:
    """An interface with k more rows, and what the resize changed.

    Attributes:
        interface: the new interface (V + k rows).
        details: JSON-able facts: k, the tie, for PIT the keep mode, ‖T' − T‖/‖T‖, the largest
            relative change of the old E and U rows, max|W_out' E' − I_d| (float64).
    """

    interface: TokenInterface
    details: dict[str, Any] = field(default_factory=dict)


def averaging_matrix(sources: Sequence[Sequence[int]], vocab_size: int) -> Tensor:
    """P (k, V) float64 with P[i, j] = 1/|S_i| for j in S_i: new rows = P @ old rows.

    Raises:
        ValueError: an empty source list or an id outside [0, V).
    """
    P = torch.zeros(len(sources), vocab_size, dtype=torch.float64)
    for i, ids in enumerate(sources):
        ids = list(ids)
        if not ids:
            raise ValueError(f"new token {i} has no source rows to average")
        bad = [j for j in ids if not 0 <= j < vocab_size]
        if bad:
            raise ValueError(f"new token {i}: source id {bad[0]} is outside [0, {vocab_size})")
        for j in ids:
            P[i, j] += 1.0 / len(ids)
    return P


def _sym_sqrt(M: Tensor, inverse: bool = False) -> Tensor:
    """M^{1/2} (or M^{-1/2}) of a symmetric positive definite M, by eigh (float64)."""
    M = (M + M.T) / 2
    w, Q = torch.linalg.eigh(M)
    if bool((w <= 0).any()):
        raise ValueError(f"matrix is not positive definite (smallest eigenvalue {w.min():.3e})")
    p = -0.5 if inverse else 0.5
    return (Q * w.pow(p)) @ Q.T


def pit_grow_factors(
    Z: Tensor,
    T: Tensor,
    N: Tensor,
    keep: PitKeep = "input",
    input_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """(Z', T', b') of a PIT interface grown by the memory rows N (see the module docstring).

    Args:
        Z: (V, d) float64, orthonormal columns (Z^T 1 = 0 when `input_bias` is given).
        T: (d, d) float64 symmetric positive definite.
        N: (k, d) float64: the new tokens' memory rows before the correction.
        keep: "input", "output" or "naive".
        input_bias: (d,) float64 for a centred memory, else None.

    Returns:
        Z' (V + k, d) with Z'^T Z' = I_d (and Z'^T 1 = 0 when centred), T' (d, d) SPD, b' or None.

    Raises:
        ValueError: an unknown `keep`, or new rows so long that I − N^T N is not positive
            definite (‖N‖₂ ≥ 1: no orthonormal completion keeps them).
    """
    if keep not in PIT_KEEPS:
        raise ValueError(f"pit_keep must be one of {PIT_KEEPS}, got {keep!r}")
    V, d = Z.shape
    k = N.shape[0]
    centred = input_bias is not None
    mu = N.sum(dim=0) / (V + k) if centred else torch.zeros(d, dtype=Z.dtype)
    if keep == "naive":
        stacked = torch.cat([Z, N]) - mu
        return polar_retraction(stacked, 0.0), T.clone(), input_bias
    C = torch.eye(d, dtype=Z.dtype) - N.T @ N + (V + k) * torch.outer(mu, mu)
    if bool(torch.linalg.eigvalsh((C + C.T) / 2).min() <= 0):
        raise ValueError(
            "the new tokens' memory rows are too long (I - N^T N is not positive definite): "
            "no orthonormal memory keeps them"
        )
    T_inv = torch.linalg.inv(T)
    if keep == "input":
        T_new = T @ _sym_sqrt(T_inv @ C @ T_inv) @ T
        A = T_inv @ T_new
    else:
        T_new = T @ _sym_sqrt(T @ C @ T, inverse=True) @ T
        A = T @ torch.linalg.inv(T_new)
    T_new = (T_new + T_new.T) / 2
    Z_new = torch.cat([Z @ A, N]) - mu
    b_new = None
    if centred:
        b_new = input_bias + mu @ torch.linalg.inv(T_new)
    return Z_new, T_new, b_new


def _relative_row_change(old: Tensor, new: Tensor) -> float:
    """max over rows of ‖new_v − old_v‖ / ‖old_v‖ (rows of zero norm skipped)."""
    norms = old.norm(dim=1)
    keep = norms > 0
    if not bool(keep.any()):
        return 0.0
    return float(((new - old).norm(dim=1)[keep] / norms[keep]).max())


@torch.no_grad()
def grow_interface(
    interface: TokenInterface,
    sources: Sequence[Sequence[int]],
    *,
    pit_keep: PitKeep = "input",
) -> GrownInterface:
    """A copy of `interface` with len(sources) new rows appended (see the module docstring).

    Args:
        interface: an untied, TT or PIT interface (V rows, d columns).
        sources: for each new token, the old ids whose rows it averages.
        pit_keep: PIT only: which old side is kept exactly ("input", "output", "naive").

    Returns:
        The grown interface (same class, options, dtype and device) and the resize's details.

    Raises:
        ValueError: an empty `sources`, a bad id, or (PIT) new rows that cannot be kept.
    """
    from tying.interface import tie_of
    from tying.interface.pit import PseudoInverseTying, activation_inverse

    if not sources:
        raise ValueError("no new tokens to add")
    V, d, k = interface.vocab_size, interface.d_model, len(sources)
    ref = next(iter(interface.state_dict().values()))
    dtype, device = ref.dtype, ref.device
    P = averaging_matrix(sources, V)
    E0, U0 = interface.analysis_matrices()
    E0, U0 = E0.cpu().double(), U0.cpu().double()
    state = {n: t.detach().cpu().double() for n, t in interface.state_dict().items()}
    details: dict[str, Any] = {"added": k, "tie": tie_of(interface), "old_vocab_size": V}
    if isinstance(interface, PseudoInverseTying):
        Z = state["z"]
        L = interface.cholesky_factor(interface.l_param.detach().cpu().double())
        T = L @ L.T
        b = state.get("input_bias")
        Z_new, T_new, b_new = pit_grow_factors(Z, T, P @ Z, pit_keep, b)
        L_new = torch.linalg.cholesky(T_new)
        diag = torch.diagonal(L_new)
        if interface.diag_clamp is not None:
            lo, hi = interface.diag_clamp
            if bool((diag < lo).any() or (diag > hi).any()):
                raise ValueError(
                    f"the resized T's Cholesky diagonal leaves diag_clamp {interface.diag_clamp}"
                )
        l_param = torch.tril(L_new, diagonal=-1)
        l_param.diagonal().copy_(activation_inverse(diag, interface.diag_activation))
        state["z"], state["l_param"] = Z_new, l_param
        if b_new is not None:
            state["input_bias"] = b_new
        details.update(
            pit_keep=pit_keep,
            t_rel_change=float((T_new - T).norm() / T.norm()),
            new_rows_norm=float((P @ Z).norm(dim=1).max()),
        )
    else:
        for name in interface.vocab_tensors:
            state[name] = torch.cat([state[name], P @ state[name]])
    if "bias" in state:
        state["bias"] = torch.cat([state["bias"], P @ state["bias"]])
    grown = type(interface).placeholder(
        V + k, d, dtype=torch.float64, bias="bias" in state, **interface.options()
    )
    grown.load_state_dict(state, strict=True)
    E1, U1 = grown.analysis_matrices()
    if isinstance(grown, PseudoInverseTying):
        details["identity_error"] = float(
            (U1.T @ E1 - torch.eye(d, dtype=torch.float64)).abs().max()
        )
    details["old_input_rel_change"] = _relative_row_change(E0, E1[:V])
    details["old_output_rel_change"] = _relative_row_change(U0, U1[:V])
    details["new_input_target_rel_error"] = _relative_row_change(P @ E0, E1[V:])
    details["new_output_target_rel_error"] = _relative_row_change(P @ U0, U1[V:])
    grown = grown.to(dtype=dtype, device=device)
    for name, p in grown.named_parameters():
        old = dict(interface.named_parameters()).get(name)
        if old is not None:
            p.requires_grad_(old.requires_grad)
    return GrownInterface(grown, details)
