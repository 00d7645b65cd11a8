"""`tying tokenize`: a corpus into token shards (the cache the trainer reads, or a folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tying.data.corpus import resolve_source
from tying.data.shards import Manifest, build_shards, ensure_shards
from tying.data.tokenizer import load_tokenizer
from tying.errors import ExistingFileError
from tying.options.tokenize import TokenizeOptions as TokenizeOptions


def tokenize_corpus(options: TokenizeOptions) -> dict[str, Any]:
    """Tokenize `options.source` into shards; returns the manifest summary.

    Returns:
        {"folder", "tokens", "documents", "shards", "dtype", "tokenizer", "vocab_size"}.

    Raises:
        FileExistsError: `out` already holds shards and `overwrite` is off.
    """
    sources = list(options.source) or [None]
    source = resolve_source(sources[0]) if len(sources) == 1 else sources
    tokenizer = load_tokenizer(options.tokenizer)
    kwargs: dict[str, Any] = {
        "text_field": options.text_field,
        "max_documents": options.max_documents,
        "batch_docs": options.batch_docs,
        "progress": options.progress,
    }
    if options.shard_tokens is not None:
        kwargs["shard_tokens"] = options.shard_tokens
    if options.out is not None:
        folder = Path(options.out)
        if folder.exists() and any(folder.iterdir()) and not options.overwrite:
            raise ExistingFileError(
                f"{folder} is not empty: choose another output folder, or set overwrite to replace it"
            )
        build_shards(source, folder, tokenizer, **kwargs)
    else:
        folder = ensure_shards(source, options.cache_root, tokenizer, **kwargs)
    manifest = Manifest.load(folder)
    return {
        "folder": str(folder),
        "tokens": manifest.num_tokens,
        "documents": manifest.num_documents,
        "shards": len(manifest.shards),
        "dtype": manifest.dtype,
        "tokenizer": manifest.tokenizer["name"],
        "vocab_size": manifest.vocab_size,
    }


__all__ = ["TokenizeOptions", "tokenize_corpus"]
