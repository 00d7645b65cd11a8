"""Parameter accounting of any model's token interface (bias paper, Appendix A).

From measured counts (e.g. of a Hugging Face model), with V = vocab_size and d = d_model:

    total             all free parameters (a tied matrix counted once)
    embedding         parameters of the token interface (untied 2·V·d, TT V·d,
                      PIT V·d + d(d+1)/2; or whatever the model reports)
    non_embedding     total − embedding
    embedding_share   embedding / total                          (fraction in [0, 1])
    tying_saves       2·V·d − embedding: parameters this interface saves against an
                      untied one (0 for untied models)
    untied_total      non_embedding + 2·V·d: the same model with an untied interface
    tying_potential_share  V·d / untied_total: the share of the untied model's parameters
                      that tying one V×d matrix removes (fraction in [0, 1]; the same for
                      the tied and the untied variant of a model)

`tying.decoder.params.parameter_counts` gives the same keys in closed form for
this project's presets.
"""

from __future__ import annotations

from typing import Any

from tying.analysis._validate import check_positive_int
from tying.interface.registry import TIES


def params_summary(
    total: int, embedding: int, *, vocab_size: int, d_model: int, tie: str
) -> dict[str, Any]:
    """Embedding share and tying savings of a model (see the module docstring).

    Args:
        total: all free parameters of the model (a tied matrix counted once).
        embedding: parameters of its token interface.
        vocab_size: V.
        d_model: d.
        tie: "untied", "tt" or "pit" (recorded; the counts are taken as given).

    Raises:
        ValueError: non-positive counts, embedding > total, or an unknown tie.
    """
    check_positive_int(total, "total")
    check_positive_int(embedding, "embedding")
    check_positive_int(vocab_size, "vocab_size")
    check_positive_int(d_model, "d_model")
    if tie not in TIES:
        raise ValueError(f"tie must be one of {TIES}, got {tie!r}")
    if embedding > total:
        raise ValueError(f"embedding parameters ({embedding}) exceed the total ({total})")
    one = vocab_size * d_model
    non_embedding = total - embedding
    untied_total = non_embedding + 2 * one
    return {
        "tie": tie,
        "total": total,
        "embedding": embedding,
        "non_embedding": non_embedding,
        "embedding_share": embedding / total,
        "tying_saves": 2 * one - embedding,
        "untied_total": untied_total,
        "tying_potential_share": one / untied_total,
    }
