"""Options of `tying probe`."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Literal

from tying.config import positional, renamed
from tying.errors import InvalidInputError

#: Blocks that `ProbeOptions.skip` may name ("plots" turns the figures off).
BLOCKS = (
    "consistency",
    "params",
    "spectra",
    "norm_frequency",
    "drift",
    "alignment",
    "knn_overlap",
    "spectral_distance",
    "plots",
)
#: Short names accepted for blocks.
BLOCK_ALIASES = {"knn": "knn_overlap", "spectral": "spectral_distance", "norms": "norm_frequency"}


def parse_skip(names: str | list[str] | tuple[str, ...] | None) -> frozenset[str]:
    """Block names from "a,b" strings or lists (aliases: knn, spectral, norms).

    Raises:
        ValueError: an unknown block name.
    """
    if names is None:
        return frozenset()
    items = [names] if isinstance(names, str) else list(names)
    out = set()
    for item in items:
        for name in filter(None, (n.strip() for n in item.split(","))):
            name = BLOCK_ALIASES.get(name, name)
            if name not in BLOCKS:
                raise InvalidInputError(
                    f"unknown block {name!r} to skip; expected some of {', '.join(BLOCKS)} "
                    f"(or {', '.join(BLOCK_ALIASES)})"
                )
            out.add(name)
    return frozenset(out)


@dataclass
class ProbeOptions:
    """What to probe and how (the `tying probe` arguments).

    Attributes:
        spec: the model: a run or checkpoint folder, "smollm2", a .gguf, a model folder, a hub id.
        against: a second model to compare with (None: no comparison).
        corpus: text for the token counts of norm_frequency (None: the Gutenberg validation
            books).
        corpus_tokens: tokens counted from the corpus (null or 0 = all).
        min_count: tokens seen fewer times are left out of norm_frequency.
        k: neighbours of the KNN@k overlap.
        spectral_k: neighbours of the spectral distance's kNN graphs.
        n_components: eigenpairs of the omnibus embedding.
        spectral_definition: "published" (the bias paper's code: half-weight graphs,
            spectral norm) or "union-frobenius" (binary union graphs, Frobenius norm).
        identity: the identity alignment of raw rows ("raw", published) or of mean-centred
            ones ("centred").
        maps: matrices the comparisons use, "raw" (E, U) or "effective" (s·E, U diag(g)).
        pairs: "all" six pairs of {A,B}.{input,output}, or "cross" (A.x vs B.y only).
        skip: blocks left out, by name (consistency, params, spectra, norm_frequency, drift,
            alignment, knn_overlap, spectral_distance, plots; aliases knn, spectral, norms),
            several or one "a,b" string.
        tokenizer: override the model's tokenizer (a tokenizer spec).
        against_tokenizer: override the second model's tokenizer.
        dtype: float32, bfloat16 or float16, the dtype the weights are loaded in (every
            metric runs in float32/float64).
        out: output folder (probe.json, probe.md, probe.html, PNGs); null = probe-<name>.
    """

    spec: str = positional()
    against: str | None = None
    corpus: str | None = None
    corpus_tokens: int | None = 200_000
    min_count: int = 1
    k: int = 10
    spectral_k: int = 64
    n_components: int = 128
    spectral_definition: Literal["published", "union-frobenius"] = "published"
    identity: Literal["raw", "centred"] = "raw"
    maps: Literal["raw", "effective"] = "raw"
    pairs: Literal["all", "cross"] = "all"
    skip: frozenset[str] | str = field(default_factory=frozenset)
    tokenizer: str | None = None
    against_tokenizer: str | None = None
    dtype: Literal["float32", "bfloat16", "float16"] = renamed("float32", "load_dtype")
    out: str | None = None

    def __post_init__(self) -> None:
        self.skip = parse_skip(self.skip if isinstance(self.skip, str) else tuple(self.skip))
        for name in ("k", "spectral_k", "n_components", "min_count"):
            if getattr(self, name) < 1:
                raise InvalidInputError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.corpus_tokens == 0:  # 0 = all, as in the CLI of tying 0.1
            self.corpus_tokens = None
        if self.corpus_tokens is not None and self.corpus_tokens < 1:
            raise InvalidInputError(f"corpus_tokens must be >= 1 or None, got {self.corpus_tokens}")
        hints = typing.get_type_hints(type(self))
        for name in ("spectral_definition", "identity", "maps", "pairs"):
            choices = typing.get_args(hints[name])
            if getattr(self, name) not in choices:
                raise InvalidInputError(
                    f"{name} must be one of {choices}, got {getattr(self, name)!r}"
                )
