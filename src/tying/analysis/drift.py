"""Drift of a token matrix across the checkpoints of a training run (bias paper, §5.1).

For checkpoints X_0, X_1, ..., X_n of the same matrix (E or U), each V×d:

    to_first[t]      mean_v cos(X_t[v], X_0[v])       t = 0..n  (to_first[0] = 1 unless rows are zero)
    to_previous[t]   mean_v cos(X_t[v], X_{t-1}[v])   t = 1..n  (list of n values)

Mean per-token cosine similarities: unitless, in [-1, 1]; float64. A zero row
has cosine 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from tying.analysis._validate import check_matrix, check_same_shape
from tying.analysis.rowwise import row_cosine


def drift(matrices: Sequence[Tensor]) -> dict[str, Any]:
    """Mean per-token cosine of each checkpoint's matrix to the first and to the previous one.

    Args:
        matrices: checkpoints in training order, each (V, d), all the same shape.

    Returns:
        {"n_checkpoints": n + 1, "to_first": [n + 1 floats], "to_previous": [n floats]}.

    Raises:
        ValueError: no matrices, shapes differ, or non-finite entries.
    """
    if len(matrices) == 0:
        raise ValueError("drift needs at least one checkpoint matrix")
    for t, M in enumerate(matrices):
        check_matrix(M, f"checkpoint {t}")
        check_same_shape(M, matrices[0], f"checkpoint {t}", "checkpoint 0")
    first = matrices[0]
    to_first = [float(row_cosine(M, first).mean()) for M in matrices]
    to_previous = [
        float(row_cosine(matrices[t], matrices[t - 1]).mean()) for t in range(1, len(matrices))
    ]
    return {"n_checkpoints": len(matrices), "to_first": to_first, "to_previous": to_previous}
