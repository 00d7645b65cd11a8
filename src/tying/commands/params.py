"""`tying params PRESET [--vocab V] [--tie tt|pit|untied] [--json]`: parameter accounting."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.params import ParamsOptions

    add_config_arguments(parser, ParamsOptions)
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    from tying.config_flags import config_from_args
    from tying.options.params import ParamsOptions

    options = config_from_args(ParamsOptions, args)  # checked before torch loads
    from tying.decoder.params import format_count, preset_parameters

    counts = preset_parameters(options)
    if args.json:
        print(json.dumps(counts, indent=2))
        return 0
    c = counts
    print(
        f"{c['preset']}: L={c['n_layers']} d={c['d_model']} heads={c['n_heads']}x{c['head_dim']} "
        f"kv_heads={c['n_kv_heads']} d_ff={c['d_ff']} norm={c['norm']} V={c['vocab_size']} "
        f"tie={c['tie']}"
    )
    rows = [
        ("attention (all layers)", c["components"]["attention"]),
        ("mlp (all layers)", c["components"]["mlp"]),
        ("norms", c["components"]["norms"]),
        ("non-embedding", c["non_embedding"]),
        ("embedding (interface)", c["embedding"]),
        ("total", c["total"]),
        ("saved vs untied", c["tying_saves"]),
    ]
    for label, value in rows:
        print(f"  {label:<24}{value:>16,}  ({format_count(value)})")
    print(f"  {'embedding share':<24}{c['embedding_share']:>16.2%}")
    return 0
