"""Teacher mode at step 0: loss and KL to the teacher right after each conversion option.

Default: SmolLM2-135M (offline GGUF), measured on the first 2,048 tokens of the
Gutenberg validation text; calibration windows (scale search, fit) drawn from the
first 8 books of the Gutenberg training split (never the measured text). `--model`
also takes any transformers folder (e.g. the GPT-2 of `studies/second_teachers.py`)
or a scratch-mode training run of our decoder (converted by
`tying.conversion.convert`).

Usage:
    python benchmarks/teacher_init.py [--model smollm2] [--tokens 2048] [--fit-tokens 65536]
        [--variants pit/output,pit/fit] [--out benchmarks/results/teacher_init.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from tying.conversion import VARIANTS, FitOptions, conversion_table
from tying.hf import load
from tying.loader import is_run_spec, load_any
from tying.teacher.step0 import text_tokenizer, windows_from_source


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2")
    parser.add_argument(
        "--data", default=None, help="held-out text (default: Gutenberg validation)"
    )
    parser.add_argument(
        "--calibration", default=None, help="calibration text (default: Gutenberg train)"
    )
    parser.add_argument("--calibration-documents", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=2048, help="held-out tokens measured")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--fit-tokens", type=int, default=FitOptions().tokens)
    parser.add_argument("--fit-params", default=FitOptions().params)
    parser.add_argument("--fit-check-tokens", type=int, default=FitOptions().check_tokens)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "teacher_init.json")
    )
    args = parser.parse_args()
    from tying.data.corpus import default_train_source, default_validation_source

    t0 = time.perf_counter()
    if is_run_spec(args.model):  # our decoder: a scratch-mode training run
        loaded = load_any(args.model)
        teacher, tok = loaded.model.to(getattr(torch, args.dtype)), loaded.tokenizer
        V = int(teacher.interface.vocab_size)
    else:
        teacher, tokenizer = load(args.model, dtype=getattr(torch, args.dtype))
        tok = text_tokenizer(args.model, tokenizer)
        V = int(teacher.get_input_embeddings().weight.shape[0])
    fit = FitOptions(
        tokens=args.fit_tokens, params=args.fit_params, check_tokens=args.fit_check_tokens
    )
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    variants = {n: VARIANTS[n] for n in names}
    needs = any(
        v.get("t_init") == "fit" or v.get("input_scale") == "auto" for v in variants.values()
    )
    calibration = None
    if needs:
        calibration = windows_from_source(
            args.calibration or default_train_source(),
            tok,
            tokens=fit.tokens + fit.check_tokens,
            seq_len=args.seq_len,
            shuffle_seed=0,
            max_documents=args.calibration_documents,
            vocab_size=V,
        )
    source = args.data or str(default_validation_source())
    measure = windows_from_source(
        source, tok, tokens=args.tokens, seq_len=args.seq_len, vocab_size=V
    )
    table = conversion_table(teacher, measure, calibration, variants, fit, progress=True)
    table.update(
        model=args.model,
        data=source,
        calibration=args.calibration
        or f"gutenberg-train (first {args.calibration_documents} books)",
        dtype=args.dtype,
        fit_options=fit.__dict__,
        elapsed_s=round(time.perf_counter() - t0, 1),
    )
    print(json.dumps(table, indent=2))
    print(markdown(table))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, indent=2) + "\n")


def markdown(table: dict) -> str:
    """The step-0 table as Markdown rows: variant | r | loss | KL (nats/token)."""
    lines = [
        "| conversion | input scale r | loss | KL from teacher |",
        "|---|---:|---:|---:|",
        f"| teacher | | {table['teacher']['loss']:.3f} | 0 |",
    ]
    for name, row in table["variants"].items():
        r = row["input_scale"]
        lines.append(
            f"| {name} | {'' if r is None else f'{r:.3g}'} | {row['loss']:.3f} | {row['kl']:.3f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
