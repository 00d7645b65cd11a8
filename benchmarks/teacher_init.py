"""Teacher mode at step 0: loss and KL to the teacher right after each conversion.

Default: SmolLM2-135M (offline GGUF) on the Gutenberg validation text.

Usage:
    python benchmarks/teacher_init.py [--model smollm2] [--tokens 8192] [--out benchmarks/results/teacher_init.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from tying.data.batches import eval_batches
from tying.data.corpus import default_validation_source
from tying.data.shards import ensure_shards, open_shards
from tying.data.tokenizer import load_tokenizer
from tying.hf import HFCausalLM, convert, load
from tying.teacher.step0 import conversion_table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2")
    parser.add_argument(
        "--data", default=None, help="held-out text (default: Gutenberg validation)"
    )
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "teacher_init.json")
    )
    args = parser.parse_args()
    t0 = time.perf_counter()
    teacher, _ = load(args.model)
    tokenizer = load_tokenizer(args.model)
    source = args.data or str(default_validation_source())
    store = open_shards(
        ensure_shards(source, tokenizer=tokenizer),
        expected_vocab_size=teacher.config.vocab_size,
        allow_padded_vocab=True,
    )
    batches = list(eval_batches(store, args.seq_len, args.batch, max_tokens=args.tokens))
    with torch.no_grad():
        table = conversion_table(teacher, batches, convert, HFCausalLM)
    table.update(model=args.model, data=source, elapsed_s=time.perf_counter() - t0)
    print(json.dumps(table, indent=2))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, indent=2) + "\n")


if __name__ == "__main__":
    main()
