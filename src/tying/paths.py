"""Where the project finds its data: one setting, overridable by environment variable."""

from __future__ import annotations

import os
from pathlib import Path

#: Environment variable that points to the data folder (default: ../shared/data beside the repository).
DATA_DIR_ENV = "TYING_DATA_DIR"
#: Environment variable that points to the benchmark folder (default: <data folder>/bench).
BENCH_DIR_ENV = "TYING_BENCH_DIR"


def repo_root() -> Path:
    """The repository root when running from a source checkout (src/tying/paths.py -> ../..)."""
    return Path(__file__).resolve().parents[2]


def data_dir() -> Path:
    """The shared data folder: $TYING_DATA_DIR, else `<repo>/../shared/data`.

    Holds corpus/gutenberg (train-*.jsonl.xz, validation.jsonl.xz), corpus/wikitext-2, bench/.
    """
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return (repo_root().parent / "shared" / "data").resolve()


def gutenberg_train() -> Path:
    """Folder of the default training corpus shards (train-*.jsonl.xz)."""
    return data_dir() / "corpus" / "gutenberg"


def gutenberg_validation() -> Path:
    """The default held-out text (validation.jsonl.xz)."""
    return data_dir() / "corpus" / "gutenberg" / "validation.jsonl.xz"


def bench_dir() -> Path:
    """The benchmark folder: $TYING_BENCH_DIR, else `data_dir()/bench`.

    Holds gsm8k/{train,test}.jsonl, svamp/SVAMP.json, mbpp/mbpp.jsonl, humaneval/HumanEval.jsonl.gz.
    """
    env = os.environ.get(BENCH_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return data_dir() / "bench"


def cache_dir() -> Path:
    """Cache for tokenized shards and converted models: $TYING_CACHE_DIR, else ~/.cache/tying."""
    env = os.environ.get("TYING_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tying"
