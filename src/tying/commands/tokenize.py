"""`tying tokenize`: tokenize a corpus into token shards (the cache the trainer reads)."""

from __future__ import annotations

import argparse
import json

HELP = "tokenize a corpus (.txt/.jsonl/.parquet, .gz/.xz, dirs, globs, hf:NAME) into token shards"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        nargs="*",
        help="files, directories, globs or one hf:NAME[:CONFIG][@SPLIT] spec; aliases "
        "gutenberg-train (default), gutenberg-validation",
    )
    parser.add_argument(
        "--tokenizer",
        default="gpt2",
        help="gpt2 (default), smollm2, a tokenizer folder, tokenizer.json or .gguf",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="write the shards to this folder (default: the shard cache, reused "
        "when source and tokenizer are unchanged)",
    )
    parser.add_argument(
        "--cache-root", default=None, help="shard cache folder (default $TYING_CACHE_DIR/shards)"
    )
    parser.add_argument("--text-field", default="text", help="JSON field / column of the text")
    parser.add_argument("--max-documents", type=int, default=None, help="stop after N documents")
    parser.add_argument("--shard-tokens", type=int, default=None, help="tokens per shard file")
    parser.add_argument("--batch-docs", type=int, default=256, help="documents per encode batch")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="print the manifest summary as JSON")


def run(args: argparse.Namespace) -> int:
    from tying.data.corpus import resolve_source
    from tying.data.shards import Manifest, build_shards, ensure_shards
    from tying.data.tokenizer import load_tokenizer

    sources = args.source or [None]
    source = resolve_source(sources[0]) if len(sources) == 1 else sources
    tokenizer = load_tokenizer(args.tokenizer)
    kwargs = {
        "text_field": args.text_field,
        "max_documents": args.max_documents,
        "batch_docs": args.batch_docs,
        "progress": not args.no_progress,
    }
    if args.shard_tokens is not None:
        kwargs["shard_tokens"] = args.shard_tokens
    if args.out is not None:
        build_shards(source, args.out, tokenizer, **kwargs)
        folder = args.out
    else:
        folder = ensure_shards(source, args.cache_root, tokenizer, **kwargs)
    manifest = Manifest.load(folder)
    summary = {
        "folder": str(folder),
        "tokens": manifest.num_tokens,
        "documents": manifest.num_documents,
        "shards": len(manifest.shards),
        "dtype": manifest.dtype,
        "tokenizer": manifest.tokenizer["name"],
        "vocab_size": manifest.vocab_size,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for key, value in summary.items():
            print(f"{key:>11}: {value}")
    return 0
