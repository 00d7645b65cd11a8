"""The preset tables of docs/model.md ("Presets"), generated from `tying.decoder.presets.PRESETS`
and the closed-form counts of `tying.decoder.params.parameter_counts`, so that no cell is typed
by hand.

    python -m studies.preset_tables            # print the two tables
    python -m studies.preset_tables --write    # replace them in docs/model.md

tests/docs/test_preset_tables.py checks that the page holds what `render` gives today.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from studies import ROOT, replace_block

PAGE = ROOT / "docs" / "model.md"
#: The vocabularies of the two tables: the paper's setting and the GPT-2 tokenizer's.
PAPER_VOCAB = 32_000
GPT2_VOCAB = 50_257
BEGIN = "<!-- generated: python -m studies.preset_tables --write -->"
END = "<!-- end generated -->"


def _counts(preset: str, vocab: int) -> dict[str, dict]:
    from tying.decoder.params import parameter_counts
    from tying.decoder.presets import preset_config

    return {
        tie: {
            "config": preset_config(preset, vocab_size=vocab, tie=tie),
            **parameter_counts(preset_config(preset, vocab_size=vocab, tie=tie)),
        }
        for tie in ("untied", "tt", "pit")
    }


def _row_counts(c: dict[str, dict]) -> list[str]:
    return [
        f"{c['tt']['non_embedding']:,}",
        f"{c['untied']['total']:,}",
        f"{c['tt']['total']:,}",
        f"{c['pit']['total']:,}",
        f"{100 * c['tt']['embedding_share']:.1f}%",
    ]


def render() -> str:
    """The two tables of docs/model.md's "Presets" section, headings included (Markdown)."""
    from tying.decoder.presets import PRESETS

    counts = ["non-embedding", "untied total", "TT total", "PIT total", "TT embedding share"]
    shape = ["preset", "L", "d", "heads × D", "kv heads", "d_ff"]
    lines = [f"### V = {PAPER_VOCAB:,} (the paper's setting)", ""]
    lines += [_table_head(shape + counts)]
    for name in PRESETS:
        c = _counts(name, PAPER_VOCAB)
        cfg = c["tt"]["config"]
        cells = [name, str(cfg.n_layers), str(cfg.d_model)]
        cells += [f"{cfg.n_heads}×{cfg.head_dim}", str(cfg.n_kv_heads), str(cfg.d_ff)]
        lines.append("| " + " | ".join(cells + _row_counts(c)) + " |")
    lines += ["", f"### V = {GPT2_VOCAB:,} (GPT-2 tokenizer, the default corpus)", ""]
    lines += [_table_head(["preset", *counts])]
    for name in PRESETS:
        lines.append("| " + " | ".join([name, *_row_counts(_counts(name, GPT2_VOCAB))]) + " |")
    return "\n".join(lines)


def _table_head(columns: list[str]) -> str:
    return "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns)


def write(page: Path = PAGE) -> None:
    """Replace the generated block of `page` by `render()`."""
    text = page.read_text(encoding="utf-8")
    page.write_text(replace_block(text, BEGIN, END, f"{BEGIN}\n{render()}\n{END}"), "utf-8")
    print(f"wrote the preset tables of {page}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="replace them in docs/model.md")
    args = parser.parse_args(argv)
    if args.write:
        write()
    else:
        print(render())


if __name__ == "__main__":
    main()
