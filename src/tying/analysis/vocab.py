"""Matching the tokens of two vocabularies by their strings."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def match_vocabularies(
    tokens_a: Sequence[str | None], tokens_b: Sequence[str | None]
) -> tuple[Tensor, Tensor, int]:
    """Token ids of A and B that carry the same token string.

    Token v of A and token w of B are matched when tokens_a[v] == tokens_b[w]
    (exact string equality, the tokenizers' own token strings, e.g. from
    `tokenizer.convert_ids_to_tokens(range(V))`). A string that occurs more than
    once in one vocabulary is matched through its first (lowest) id only;
    ids whose token is None are skipped.

    Args:
        tokens_a: token string of each id of A (index = id).
        tokens_b: token string of each id of B.

    Returns:
        (idx_a, idx_b, n_matched): two (n_matched,) int64 tensors, in increasing order of
        idx_a, so that A[idx_a] and B[idx_b] have one row per shared token.

    Raises:
        ValueError: an entry is neither a str nor None.
    """
    first_b: dict[str, int] = {}
    for w, tok in enumerate(tokens_b):
        if tok is None:
            continue
        if not isinstance(tok, str):
            raise ValueError(
                f"tokens_b[{w}] is {type(tok).__name__}; expected a token string or None"
            )
        first_b.setdefault(tok, w)
    seen: set[str] = set()
    idx_a: list[int] = []
    idx_b: list[int] = []
    for v, tok in enumerate(tokens_a):
        if tok is None:
            continue
        if not isinstance(tok, str):
            raise ValueError(
                f"tokens_a[{v}] is {type(tok).__name__}; expected a token string or None"
            )
        if tok in seen:
            continue
        seen.add(tok)
        w = first_b.get(tok)
        if w is not None:
            idx_a.append(v)
            idx_b.append(w)
    return (
        torch.tensor(idx_a, dtype=torch.int64),
        torch.tensor(idx_b, dtype=torch.int64),
        len(idx_a),
    )
