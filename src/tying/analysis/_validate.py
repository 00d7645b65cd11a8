"""Input checks shared by the analysis functions (clear errors, no computation)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _all_finite(M: Tensor) -> bool:
    """True when every entry is finite; one min/max pass (NaN and ±Inf propagate to them)."""
    lo, hi = torch.aminmax(M.detach())
    return bool(torch.isfinite(lo)) and bool(torch.isfinite(hi))


def check_matrix(M: object, name: str) -> Tensor:
    """Return `M` unchanged if it is a finite floating-point matrix, else raise ValueError.

    Args:
        M: the object to check.
        name: how the error message names it (e.g. "the embedding E").
    """
    if not isinstance(M, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(M).__name__}")
    if M.dim() != 2:
        raise ValueError(f"{name} must be a matrix (rows, columns), got shape {tuple(M.shape)}")
    if not M.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {M.dtype}")
    if M.shape[0] == 0 or M.shape[1] == 0:
        raise ValueError(
            f"{name} is empty (shape {tuple(M.shape)}); expected at least one row and column"
        )
    if not _all_finite(M):
        n_bad = int((~torch.isfinite(M)).sum())
        raise ValueError(
            f"{name} has {n_bad} non-finite entries (NaN or Inf); expected a finite matrix "
            "(check the checkpoint, or the dtype it was cast to)"
        )
    return M


def check_same_rows(A: Tensor, B: Tensor, name_a: str, name_b: str) -> None:
    """Raise ValueError unless A and B have the same number of rows (one row per token)."""
    if A.shape[0] != B.shape[0]:
        raise ValueError(
            f"{name_a} has {A.shape[0]} rows but {name_b} has {B.shape[0]}; both need one row per "
            "token of the same vocabulary (match the vocabularies first with match_vocabularies)"
        )


def check_same_shape(A: Tensor, B: Tensor, name_a: str, name_b: str) -> None:
    """Raise ValueError unless A and B have the same shape."""
    if A.shape != B.shape:
        raise ValueError(
            f"{name_a} has shape {tuple(A.shape)} but {name_b} has shape {tuple(B.shape)}; "
            "expected the same (V, d)"
        )


def check_vector(g: object, length: int, name: str) -> Tensor:
    """Return `g` if it is a finite floating-point vector of the given length, else raise ValueError."""
    if not isinstance(g, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(g).__name__}")
    if g.dim() != 1 or g.shape[0] != length:
        raise ValueError(f"{name} must have shape ({length},), got {tuple(g.shape)}")
    if not g.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {g.dtype}")
    if not _all_finite(g):
        raise ValueError(f"{name} has non-finite entries (NaN or Inf)")
    return g


def check_positive_int(value: object, name: str, minimum: int = 1) -> int:
    """Return `value` if it is an int >= minimum (bools refused), else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_finite_scalar(value: object, name: str, nonzero: bool = False) -> float:
    """Return `value` as a float if it is a finite real number (non-zero if asked), else raise."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a scalar, got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"{name} must be finite, got {out}")
    if nonzero and out == 0.0:
        raise ValueError(f"{name} must be non-zero")
    return out
