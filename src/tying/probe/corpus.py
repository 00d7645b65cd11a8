"""Token counts of a text corpus, for the probe's norm-against-frequency view."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tying.analysis import token_counts
from tying.errors import InvalidInputError

#: Characters per piece handed to the tokenizer (documents are cut at paragraph breaks near
#: this length, so a token cap stops after a bounded amount of surplus work).
PIECE_CHARS = 16_384
#: Pieces encoded per call of the (thread-parallel) batch encoder.
PIECES_PER_BATCH = 16


def _pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """Cut a document into pieces of about `size` characters, at paragraph breaks if possible."""
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            cut = text.rfind("\n\n", start + size // 2, end)
            end = cut if cut > start else end
        yield text[start:end]
        start = end


def corpus_token_counts(
    source: Any,
    tokenizer: Any,
    vocab_size: int,
    max_tokens: int | None = None,
) -> tuple[Tensor, dict[str, Any]]:
    """How often each token occurs in the first `max_tokens` tokens of a corpus.

    Documents are read in order (`tying.data.iter_documents`: files, folders, globs, .jsonl,
    .txt, .parquet, .gz/.xz, ``hf:NAME``), cut into pieces of about 16k characters, encoded
    without special tokens (no EOS between documents), and counted until `max_tokens` tokens
    have been seen (the last piece is truncated so the total is exact).

    Args:
        source: a text source `iter_documents` accepts.
        tokenizer: a `TextTokenizer` (`encode_batch`).
        vocab_size: V, the length of the histogram (the model's rows; may exceed the tokenizer).
        max_tokens: cap on counted tokens (None: the whole corpus).

    Returns:
        (counts, info): counts (V,) int64; info = {"tokens": counted tokens, "documents":
        documents read (the last one possibly in part), "capped": whether the count stopped
        at max_tokens}.

    Raises:
        ValueError: an empty corpus, max_tokens < 1, or ids outside [0, vocab_size).
    """
    from tying.data import iter_documents

    if max_tokens is not None and max_tokens < 1:
        raise InvalidInputError(
            f"max_tokens must be >= 1 or None (the whole corpus), got {max_tokens}"
        )
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    seen = 0
    documents = 0
    batch: list[str] = []

    def flush() -> bool:
        """Count the pending pieces; True when the cap is reached."""
        nonlocal seen
        for ids in tokenizer.encode_batch(batch):
            if max_tokens is not None and seen + len(ids) >= max_tokens:
                ids = ids[: max_tokens - seen]
                counts.add_(token_counts(np.asarray(ids, dtype=np.int64), vocab_size))
                seen += len(ids)
                return True
            counts.add_(token_counts(np.asarray(ids, dtype=np.int64), vocab_size))
            seen += len(ids)
        batch.clear()
        return False

    capped = False
    for text in iter_documents(source):
        documents += 1
        for piece in _pieces(text):
            batch.append(piece)
            if len(batch) >= PIECES_PER_BATCH and (capped := flush()):
                break
        if capped:
            break
    if not capped and batch:
        capped = flush()
    if seen == 0:
        raise InvalidInputError(f"the corpus {source} holds no tokens; pass a text file or folder")
    return counts, {"tokens": seen, "documents": documents, "capped": capped}
