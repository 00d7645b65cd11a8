"""`tying params PRESET [--vocab V] [--tie tt|pit|untied] [--json]`: parameter accounting
(no file written)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tying.config_flags import add_config_arguments
    from tying.options.params import ParamsOptions

    add_config_arguments(parser, ParamsOptions)


def run(args: argparse.Namespace) -> int:
    from tying.commands import report
    from tying.config_flags import config_from_args
    from tying.options.params import ParamsOptions

    options = config_from_args(ParamsOptions, args)  # checked before torch loads
    from tying.decoder.params import format_count, preset_parameters

    c = counts = preset_parameters(options)
    lines = [
        f"{c['preset']}: L={c['n_layers']} d={c['d_model']} heads={c['n_heads']}x{c['head_dim']} "
        f"kv_heads={c['n_kv_heads']} d_ff={c['d_ff']} norm={c['norm']} V={c['vocab_size']} "
        f"tie={c['tie']}"
    ]
    rows = [
        ("attention (all layers)", c["components"]["attention"]),
        ("mlp (all layers)", c["components"]["mlp"]),
        ("norms", c["components"]["norms"]),
        ("non-embedding", c["non_embedding"]),
        ("embedding (interface)", c["embedding"]),
        ("total", c["total"]),
        ("saved vs untied", c["tying_saves"]),
    ]
    lines += [f"  {label:<24}{value:>16,}  ({format_count(value)})" for label, value in rows]
    lines.append(f"  {'embedding share':<24}{c['embedding_share']:>16.2%}")
    report(args, lines, counts)
    return 0
