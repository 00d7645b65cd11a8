"""The data path: text -> documents -> tokens -> shards -> batches.

- `tying.data.readers`: documents from .txt/.jsonl/.parquet (plain, .gz, .xz), directories, globs
  and Hugging Face datasets (``hf:NAME``).
- `tying.data.tokenizer`: `load_tokenizer` (GPT-2 BPE by default, HF folders, GGUF models).
- `tying.data.shards`: `build_shards` / `ensure_shards` into uint16/uint32 memmap shards with a
  manifest, `open_shards` -> `TokenStore`.
- `tying.data.batches`: `WindowSampler` (shuffled, resumable, rank-sharded) and `eval_batches`.
- `tying.data.corpus`: the default Gutenberg corpus and `prepare_store`.

See docs/data.md.
"""

from tying.data.batches import WindowSampler, eval_batches
from tying.data.corpus import (
    default_train_source,
    default_validation_source,
    prepare_store,
    resolve_source,
)
from tying.data.readers import iter_documents, resolve_files
from tying.data.shards import build_shards, ensure_shards
from tying.data.token_store import Manifest, TokenStore, open_shards
from tying.data.tokenizer import TextTokenizer, load_tokenizer

__all__ = [
    "Manifest",
    "TextTokenizer",
    "TokenStore",
    "WindowSampler",
    "build_shards",
    "default_train_source",
    "default_validation_source",
    "ensure_shards",
    "eval_batches",
    "iter_documents",
    "load_tokenizer",
    "open_shards",
    "prepare_store",
    "resolve_files",
    "resolve_source",
]
