"""Pure analysis functions of the token interface: tensors in, a dict or a float out.

Every metric is defined once, in docs/metrics.md and in the docstring of the
function that computes it (with its unit). Nothing here reads files, prints,
or depends on a model class: the probe CLI composes these functions.

- `consistency(E, U, final_norm_gain, embed_scale)`: PIT-paper interface consistency,
  raw and effective.
- `alignment(src, tgt, identity=)`, `alignment_table(matrices)`: identity (raw by default,
  or centred) / orthogonal / linear maps of a source onto a target.
- `knn_indices(X, k)`, `knn_overlap(A, B, k)`, `neighbor_overlap(idx_a, idx_b)`: cosine KNN@k,
  ties broken by token index.
- `spectral_distance(A, B, k, n_components, definition=)` (+ `knn_graph`, `omnibus_embedding`,
  `omnibus_distance` to reuse neighbour lists): the published definition by default,
  "union-frobenius" as a named option.
- `match_vocabularies(tokens_a, tokens_b)`, `params_summary(...)`,
  `token_counts(ids, V)`, `norm_frequency(matrix, counts)`, `drift(matrices)`,
  `row_cosine(A, B)`.
"""

from tying.analysis.alignment import (
    ALIGNMENT_KEYS,
    IDENTITY_MODES,
    alignment,
    alignment_table,
    least_squares_map,
    procrustes_map,
)
from tying.analysis.consistency import CONSISTENCY_KEYS, consistency
from tying.analysis.drift import drift
from tying.analysis.neighbors import knn_indices, knn_overlap, neighbor_overlap, normalize_rows
from tying.analysis.norms import norm_frequency, token_counts
from tying.analysis.params import params_summary
from tying.analysis.rowwise import row_cosine
from tying.analysis.spectral import (
    SPECTRAL_DEFINITIONS,
    definition_parts,
    knn_graph,
    omnibus_distance,
    omnibus_embedding,
    omnibus_matrix,
    spectral_distance,
)
from tying.analysis.vocab import match_vocabularies

__all__ = [
    "ALIGNMENT_KEYS",
    "CONSISTENCY_KEYS",
    "IDENTITY_MODES",
    "SPECTRAL_DEFINITIONS",
    "alignment",
    "alignment_table",
    "consistency",
    "definition_parts",
    "drift",
    "knn_graph",
    "knn_indices",
    "knn_overlap",
    "least_squares_map",
    "match_vocabularies",
    "neighbor_overlap",
    "norm_frequency",
    "normalize_rows",
    "omnibus_distance",
    "omnibus_embedding",
    "omnibus_matrix",
    "params_summary",
    "procrustes_map",
    "row_cosine",
    "spectral_distance",
    "token_counts",
]
