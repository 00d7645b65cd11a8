"""`tying params PRESET --vocab V --tie tt|pit|untied [--json]`: parameter accounting of a preset."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "parameter counts of a model preset (closed form: embedding, non-embedding, share, tying savings)"

_PRESET_NAMES = ("tiny", "mini", "small", "medium", "large", "xl")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "preset", metavar="PRESET", help=f"model size: one of {', '.join(_PRESET_NAMES)}"
    )
    parser.add_argument(
        "--vocab", type=int, default=50257, help="vocabulary size V (default: 50257, GPT-2)"
    )
    parser.add_argument(
        "--tie", choices=("untied", "tt", "pit"), default="tt", help="token interface (default: tt)"
    )
    parser.add_argument(
        "--norm", choices=("rms", "layer"), default="rms", help="norm type (default: rms)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    # Imported here: `tying.model` loads transformers, which every other verb would otherwise pay for.
    from tying.model.params import format_count, parameter_counts
    from tying.model.presets import preset_config

    try:
        config = preset_config(args.preset, vocab_size=args.vocab, tie=args.tie, norm=args.norm)
    except ValueError as err:
        print(f"tying params: {err}", file=sys.stderr)
        return 2
    counts = parameter_counts(config)
    shape = {
        "preset": args.preset,
        "vocab_size": config.vocab_size,
        "tie": config.tie,
        "n_layers": config.n_layers,
        "d_model": config.d_model,
        "n_heads": config.n_heads,
        "n_kv_heads": config.n_kv_heads,
        "head_dim": config.head_dim,
        "d_ff": config.d_ff,
        "norm": config.norm,
    }
    if args.json:
        print(json.dumps({**shape, **counts}, indent=2))
        return 0
    print(
        f"{args.preset}: L={config.n_layers} d={config.d_model} heads={config.n_heads}x{config.head_dim} "
        f"kv_heads={config.n_kv_heads} d_ff={config.d_ff} norm={config.norm} V={config.vocab_size} "
        f"tie={config.tie}"
    )
    rows = [
        ("attention (all layers)", counts["components"]["attention"]),
        ("mlp (all layers)", counts["components"]["mlp"]),
        ("norms", counts["components"]["norms"]),
        ("non-embedding", counts["non_embedding"]),
        ("embedding (interface)", counts["embedding"]),
        ("total", counts["total"]),
        ("saved vs untied", counts["tying_saves"]),
    ]
    for label, value in rows:
        print(f"  {label:<24}{value:>16,}  ({format_count(value)})")
    print(f"  {'embedding share':<24}{counts['embedding_share']:>16.2%}")
    return 0
