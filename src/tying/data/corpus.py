"""The default corpus and a one-call path from a source to an open token store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tying import paths
from tying.data.readers import Source
from tying.data.shards import ensure_shards
from tying.data.token_store import TokenStore, open_shards
from tying.data.tokenizer import TextTokenizer
from tying.errors import MissingFileError

#: Source aliases: names for the default corpus's splits.
ALIASES = ("gutenberg", "gutenberg-train", "gutenberg-validation")


def _missing(path: Path) -> MissingFileError:
    return MissingFileError(
        f"default corpus not found at {path}; set {paths.DATA_DIR_ENV} to the folder holding "
        "corpus/gutenberg (default: ../shared/data beside the repository), or pass a source"
    )


def default_train_source() -> str:
    """Glob of the Gutenberg training shards (``<data>/corpus/gutenberg/train-*.jsonl.xz``).

    A glob, not the folder: the folder also holds ``validation.jsonl.xz``.
    """
    folder = paths.gutenberg_train()
    if not folder.is_dir():
        raise _missing(folder)
    return str(folder / "train-*.jsonl.xz")


def default_validation_source() -> Path:
    """The Gutenberg held-out books (``<data>/corpus/gutenberg/validation.jsonl.xz``)."""
    path = paths.gutenberg_validation()
    if not path.is_file():
        raise _missing(path)
    return path


def resolve_source(source: Source | None) -> Source:
    """Expand an alias: None, ``"gutenberg"`` or ``"gutenberg-train"`` -> the training glob,
    ``"gutenberg-validation"`` -> the validation file; anything else is returned unchanged."""
    if source is None or source in ("gutenberg", "gutenberg-train"):
        return default_train_source()
    if source == "gutenberg-validation":
        return default_validation_source()
    return source


def prepare_store(
    source: Source | None = None,
    tokenizer: TextTokenizer | str | None = None,
    *,
    cache_root: str | Path | None = None,
    expected_vocab_size: int | None = None,
    allow_padded_vocab: bool = False,
    **build_kwargs: Any,
) -> TokenStore:
    """Tokenize `source` into the shard cache if needed (`ensure_shards`) and open it.

    Args:
        source: a source or alias (see `resolve_source`; default the Gutenberg training split).
        tokenizer: a `TextTokenizer` or `load_tokenizer` spec (default GPT-2).
        cache_root: shard cache folder (default ``tying.paths.cache_dir() / "shards"``).
        expected_vocab_size: the model's V, checked against the shards (see `open_shards`).
        allow_padded_vocab: accept a model V larger than the tokenizer's.
        **build_kwargs: `ensure_shards` options (``max_documents``, ``text_field``, ``progress``).
    """
    folder = ensure_shards(resolve_source(source), cache_root, tokenizer, **build_kwargs)
    return open_shards(folder, expected_vocab_size, allow_padded_vocab=allow_padded_vocab)
