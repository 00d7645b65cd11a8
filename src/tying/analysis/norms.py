"""Token row norms against corpus frequency (bias paper, §5.2).

norm_v            ||X[v]||_2 (the units of X's entries)
log_frequency_v   log(count_v / N), N = Σ counts (natural log of a relative frequency)
spearman_rho      Spearman rank correlation of (norm_v, log_frequency_v) over the tokens
                  with count_v >= min_count (unitless, in [-1, 1]); ranks are unchanged by
                  the log, so this is also the rank correlation with the raw counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from scipy import stats
from torch import Tensor

from tying.analysis._validate import check_matrix, check_positive_int


def token_counts(
    ids: Tensor | np.ndarray | Iterable[Tensor | np.ndarray], vocab_size: int
) -> Tensor:
    """How often each token id occurs: a (vocab_size,) int64 histogram.

    Args:
        ids: token ids, as one integer tensor/array of any shape or an iterable of them
            (e.g. the shards of a tokenized corpus), each id in [0, vocab_size).
        vocab_size: V.

    Raises:
        ValueError: an id outside [0, vocab_size), or non-integer ids.
    """
    check_positive_int(vocab_size, "vocab_size")
    parts = [ids] if isinstance(ids, (Tensor, np.ndarray)) else ids
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    for part in parts:
        t = torch.as_tensor(part).reshape(-1)
        if t.is_floating_point() or t.dtype == torch.bool:
            raise ValueError(f"token ids must be integers, got {t.dtype}")
        if t.numel() == 0:
            continue
        lo, hi = int(t.min()), int(t.max())
        if lo < 0 or hi >= vocab_size:
            raise ValueError(
                f"token ids must lie in [0, {vocab_size}), got ids in [{lo}, {hi}]; "
                "was the corpus tokenized with another tokenizer?"
            )
        counts += torch.bincount(t.to(torch.int64).cpu(), minlength=vocab_size)
    return counts


def norm_frequency(
    matrix: Tensor, counts: Tensor, *, min_count: int = 1, return_points: bool = False
) -> dict[str, Any]:
    """Spearman correlation between token row norms and log corpus frequency.

    Args:
        matrix: (V, d) token matrix (E, or U = W_out^T).
        counts: (V,) non-negative token counts in a corpus (see `token_counts`).
        min_count: tokens seen fewer times are left out (log 0 is undefined; default 1).
        return_points: also return the per-token values under "points" (tensors, for plots;
            not JSON-serializable).

    Returns:
        {"spearman_rho", "p_value", "n_tokens", "min_count"} (+ "points": {"token_id", "norm",
        "log_frequency"}, float64 / int64 tensors, when asked).

    Raises:
        ValueError: shapes disagree, negative counts, or fewer than 3 tokens pass min_count.
    """
    check_matrix(matrix, "the token matrix")
    check_positive_int(min_count, "min_count")
    V = matrix.shape[0]
    if not isinstance(counts, Tensor) or counts.dim() != 1 or counts.shape[0] != V:
        raise ValueError(f"counts must be a ({V},) tensor (one count per row of the matrix)")
    c = counts.detach().to(torch.float64).cpu()
    if bool((c < 0).any()):
        raise ValueError("counts must be non-negative")
    keep = (c >= min_count).nonzero().squeeze(1)
    if keep.numel() < 3:
        raise ValueError(
            f"only {keep.numel()} tokens have count >= {min_count}; need at least 3 "
            "(count a larger corpus, or lower min_count)"
        )
    norms = matrix.detach().to(torch.float64).norm(dim=1).cpu()[keep]
    log_freq = (c[keep] / c.sum()).log()
    result = stats.spearmanr(norms.numpy(), log_freq.numpy())
    rho = float(result.statistic)
    out: dict[str, Any] = {
        "spearman_rho": rho,
        "p_value": float(result.pvalue),
        "n_tokens": int(keep.numel()),
        "min_count": min_count,
    }
    if return_points:
        out["points"] = {"token_id": keep, "norm": norms, "log_frequency": log_freq}
    return out
