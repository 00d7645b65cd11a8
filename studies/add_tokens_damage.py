"""The change `tying add-tokens` makes on old text: KL(before || after) and the loss change
(nats/token) on held-out WikiText-2, per interface, init and PIT resize (keep input, keep output,
naive polar re-orthonormalisation with T kept), on SmolLM2-135M plain (TT) and PIT-converted
(`tying convert smollm2 --tie pit`), in float32 on the CPU.

    python -m studies.add_tokens_damage --tokens 4096   # -> docs/results/add_tokens_damage.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from tying.hf import convert, load
from tying.interface.resize import grow_interface
from tying.loader import as_text_tokenizer, wrap_model
from tying.paths import data_dir
from tying.update.tokens import grow_tokenizer, old_text_changes, token_sources

NEW = ["<tool_call>", "</tool_call>", " zorblax", " Qubitronic", "<|calc|>"]


def measure(loaded, text: str, n_tokens: int, seq_len: int, keeps: list[str]) -> list[dict]:
    tokenizer = loaded.tokenizer
    V = loaded.vocab_size
    backend = grow_tokenizer(tokenizer.backend, NEW, V)
    old_ids = tokenizer.encode(text)
    unchanged = backend.encode(text, add_special_tokens=False).ids == old_ids
    ids = torch.tensor(old_ids[: n_tokens + 1])
    before = loaded.interface
    grown = {}
    for init in ("mean", "subwords"):
        sources = token_sources(init, NEW, tokenizer.backend, V)
        for keep in keeps:
            grown[f"{init}/{keep}"] = grow_interface(before, sources, pit_keep=keep)
    start = time.perf_counter()
    changes = old_text_changes(
        loaded, before, {k: g.interface for k, g in grown.items()}, ids, seq_len
    )
    seconds = time.perf_counter() - start
    rows = []
    for key, g in grown.items():
        init, keep = key.split("/")
        rows.append(
            {
                "init": init,
                "pit_keep": keep if g.details["tie"] == "pit" else None,
                **changes[key],
                "resize": g.details,
                "tokenization_unchanged": unchanged,
            }
        )
        print(json.dumps({k: rows[-1][k] for k in ("init", "pit_keep", "kl_nats", "delta_loss")}))
    print(f"{seconds:.0f} s")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--out", default="docs/results/add_tokens_damage.json")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    text = (data_dir() / "corpus" / "wikitext-2" / "test.txt").read_text()
    results = {"tokens": NEW, "text": "wikitext-2 test", "positions": args.tokens, "models": {}}
    for tie in ("tt", "pit"):
        model, tok = load("smollm2")
        convert(model, tie, tokenizer=tok)
        loaded = wrap_model(model, as_text_tokenizer(tok, "smollm2"), f"smollm2-{tie}", "hf")
        keeps = ["input", "output", "naive"] if tie == "pit" else ["input"]
        results["models"][f"smollm2-{tie}"] = measure(
            loaded, text, args.tokens, args.seq_len, keeps
        )
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
