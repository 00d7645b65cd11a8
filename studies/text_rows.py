"""How many rows of the V×d matrix one batch of text touches on the input side.

The lookup's gradient is zero on every row whose token is not in the batch, so the input part
of the tied gradient touches exactly the batch's distinct token ids. `gradient_paths.py` draws
its 4,096 token ids uniformly at random, which touches V(1 − (1 − 1/V)^4096) rows in
expectation; text repeats tokens and touches far fewer. This counts them on the Gutenberg
validation books (GPT-2 tokenizer), for batches of 16 windows of 256 tokens at random starts,
as the trainer draws them.

Usage:
    python -m studies.text_rows [--batches 20] [--out docs/results/text_rows.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from studies import ROOT
from tying.data.corpus import default_validation_source, prepare_store


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20, help="batches drawn (seeds 0..n-1)")
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--out", type=Path, default=ROOT / "docs/results/text_rows.json")
    args = parser.parse_args(argv)
    store = prepare_store(default_validation_source())
    vocab = 50257
    tokens = args.windows * args.seq_len
    counts = []
    for seed in range(args.batches):
        rng = np.random.default_rng(seed)
        starts = rng.integers(0, store.num_tokens - args.seq_len, size=args.windows)
        ids = np.concatenate([store.slice(int(s), args.seq_len) for s in starts])
        counts.append(int(np.unique(ids).size))
    result = {
        "benchmark": "input-side rows touched by one batch of text",
        "text": "Gutenberg validation books, GPT-2 tokenizer",
        "vocab": vocab,
        "tokens_per_batch": tokens,
        "windows": args.windows,
        "seq_len": args.seq_len,
        "rows_touched": counts,
        "rows_touched_median": statistics.median(counts),
        "rows_touched_min": min(counts),
        "rows_touched_max": max(counts),
        "uniform_expected_rows": vocab * (1 - (1 - 1 / vocab) ** tokens),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows_touched"}, indent=2))


if __name__ == "__main__":
    main()
