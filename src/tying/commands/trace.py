"""`tying trace SPEC --prompt TEXT`: input- vs output-side anchors of the last token, per layer.

For the traced token (default: the last of the prompt) at every entry (emb, 1..L), the top-k
tokens by cosine of the residual state to the rows of E (input side) and by the logit lens
(output side), and whether they agree. Prints a table; writes DIR/trace.json and
DIR/trace.png (PIT paper §3.1, Figure 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "transition trace: top-k input-side (cos to E) and output-side (logit lens) tokens per layer"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "spec", help="run or checkpoint folder, 'smollm2', a .gguf file, a model folder or a hub id"
    )
    parser.add_argument("--prompt", required=True, help="the text; its last token is traced")
    parser.add_argument("--top-k", type=int, default=5, help="anchors per side (5)")
    parser.add_argument(
        "--position", type=int, default=-1, help="token position to trace (default -1: the last)"
    )
    parser.add_argument(
        "--out", default=None, help="folder for trace.json and trace.png (default: trace-<name>)"
    )
    parser.add_argument(
        "--tokenizer", default=None, help="override the model's tokenizer (load_tokenizer spec)"
    )
    parser.add_argument(
        "--precision", choices=("bf16", "fp32"), default="fp32", help="autocast (fp32)"
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ... (cpu)")


def _error(message: str) -> int:
    print(f"tying trace: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    import torch

    from tying.lens.trace import format_trace, plot_trace, transition_trace
    from tying.models import autocast_for, load_any

    try:
        lm = load_any(args.spec, tokenizer=args.tokenizer).to(args.device)
    except (FileNotFoundError, ValueError) as e:
        return _error(f"{args.spec}: {e}")
    tokenizer = lm.tokenizer
    if tokenizer is None:
        return _error(f"{args.spec} has no tokenizer: pass --tokenizer")
    ids = tokenizer.encode(args.prompt)
    if not ids:
        return _error("the prompt encodes to no tokens")
    try:
        trace = transition_trace(
            lm,
            torch.tensor(ids),
            k=args.top_k,
            position=args.position,
            candidates=min(tokenizer.vocab_size, lm.vocab_size),
            autocast=autocast_for(args.device, args.precision),
        )
    except (ValueError, IndexError) as e:
        return _error(str(e))

    def decode(i: int) -> str:
        return tokenizer.decode([i])

    print(format_trace(trace, decode))
    out = Path(args.out) if args.out else Path(f"trace-{lm.name}")
    out.mkdir(parents=True, exist_ok=True)
    record = {"prompt": args.prompt, **trace.to_dict(decode)}
    (out / "trace.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    plot_trace(trace, decode, out / "trace.png")
    print(f"wrote {out / 'trace.json'} and {out / 'trace.png'}")
    return 0
