"""Options of `tying tokenize`."""

from __future__ import annotations

from dataclasses import dataclass

from tying.config import positional


@dataclass
class TokenizeOptions:
    """Options of `tying tokenize`.

    Attributes:
        source: files, folders, globs or one hf:NAME[:CONFIG][@SPLIT]; aliases gutenberg-train
            (the default) and gutenberg-validation.
        tokenizer: gpt2, smollm2, a tokenizer folder, tokenizer.json or .gguf.
        out: write the shards to this folder (usable as `tying train data=FOLDER` and
            `tying eval --data FOLDER`); null = the shard cache, reused while the source and
            tokenizer are unchanged.
        cache_root: shard cache folder (null = $TYING_CACHE_DIR/shards).
        text_field: JSON field / column holding the text.
        max_documents: stop after this many documents (null = all).
        shard_tokens: tokens per shard file (null = the default size).
        batch_docs: documents per encode batch.
        overwrite: replace the shards already in `out`.
        progress: show a progress bar.
    """

    source: list[str] = positional(default_factory=list)
    tokenizer: str = "gpt2"
    out: str | None = None
    cache_root: str | None = None
    text_field: str = "text"
    max_documents: int | None = None
    shard_tokens: int | None = None
    batch_docs: int = 256
    overwrite: bool = False
    progress: bool = True
