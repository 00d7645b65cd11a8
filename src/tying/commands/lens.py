"""`tying lens SPEC [SPEC ...] --kind logit|tuned|both --out DIR`: KL(final ‖ lens) per layer.

Writes DIR/lens.json = {"models": [{"name", "kind", "unit": "bits/token", "tokens",
"kl": [one float per entry], "bytes", "kl_bits_per_byte"}]} (entry 0 = embedding output,
entry i = output of block i, the last entry = the model's own distribution, KL 0) and
DIR/lens.png. A tuned lens is trained on windows after the evaluation windows (or on
--train-data), saved under DIR/tuned/<name>/ and reloaded from there for the evaluation.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HELP = "logit / tuned lens: KL(final || lens) per layer in bits/token, for one or more models"

KINDS = ("logit", "tuned", "both")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "specs",
        nargs="+",
        metavar="SPEC",
        help="run or checkpoint folder, 'smollm2', a .gguf file, a model folder or a hub id",
    )
    parser.add_argument("--kind", choices=KINDS, default="logit", help="lens (default: logit)")
    parser.add_argument(
        "--data", default=None, help="evaluation text (default: Gutenberg validation)"
    )
    parser.add_argument("--out", required=True, help="output folder (lens.json, lens.png)")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=16384,
        help="evaluated positions per model (default 16384; 0 = the whole text)",
    )
    parser.add_argument("--seq-len", type=int, default=256, help="tokens per window (256)")
    parser.add_argument("--batch-size", type=int, default=8, help="windows per forward pass (8)")
    parser.add_argument(
        "--chunk-tokens",
        type=int,
        default=1024,
        help="positions per head evaluation; memory ~ chunk × V floats (1024)",
    )
    parser.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp32"),
        default="auto",
        help="autocast of forward passes and heads; KL always in float32 (auto: bf16 on GPU)",
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if present)")
    parser.add_argument(
        "--tokenizer", default=None, help="override the models' tokenizer (load_tokenizer spec)"
    )
    tuned = parser.add_argument_group("tuned lens")
    tuned.add_argument("--train-steps", type=int, default=250, help="optimizer steps (250)")
    tuned.add_argument(
        "--train-tokens-per-step",
        type=int,
        default=4096,
        help="tokens per step, a multiple of --seq-len (4096)",
    )
    tuned.add_argument(
        "--train-data",
        default=None,
        help="training text (default: --data, windows after the evaluation windows)",
    )
    tuned.add_argument(
        "--optimizer",
        choices=("sgd", "adam"),
        default="sgd",
        help="SGD with Nesterov momentum (the tuned-lens recipe) or Adam (default: sgd)",
    )
    tuned.add_argument(
        "--lr", type=float, default=None, help="learning rate (default: 0.1 SGD, 1e-3 Adam)"
    )
    tuned.add_argument("--seed", type=int, default=0, help="order of the training windows")
    tuned.add_argument(
        "--tuned-from",
        default=None,
        help="folder holding <name>/ lenses saved by an earlier run: load them, do not train",
    )
    parser.add_argument("--log-y", action="store_true", help="symmetric-log y axis in lens.png")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def _error(message: str) -> int:
    print(f"tying lens: error: {message}", file=sys.stderr)
    return 2


def _unique(name: str, taken: set[str]) -> str:
    candidate, i = name, 2
    while candidate in taken:
        candidate, i = f"{name}-{i}", i + 1
    taken.add(candidate)
    return candidate


def _open_store(source: str, tokenizer: Any, vocab_size: int) -> Any:
    from tying.data.shards import ensure_shards, open_shards
    from tying.paths import cache_dir

    folder = ensure_shards(source, cache_dir() / "shards", tokenizer, progress=False)
    return open_shards(folder, expected_vocab_size=vocab_size, allow_padded_vocab=True)


class _ByteCounter:
    """Wraps eval batches and adds up the UTF-8 bytes of their text."""

    def __init__(self, batches: Iterator[Any], tokenizer: Any) -> None:
        self.batches, self.tokenizer, self.bytes = batches, tokenizer, 0

    def __iter__(self) -> Iterator[Any]:
        from tying.lens.data import text_bytes

        for batch in self.batches:
            self.bytes += text_bytes(self.tokenizer, batch)
            yield batch


def run(args: argparse.Namespace) -> int:
    import torch

    from tying.data.corpus import default_validation_source, resolve_source
    from tying.lens import plot_lens_kl
    from tying.models import autocast_for

    if args.seq_len < 1 or args.batch_size < 1 or args.chunk_tokens < 1:
        return _error("--seq-len, --batch-size and --chunk-tokens must be >= 1")
    training = args.kind != "logit" and args.tuned_from is None
    if training and (
        args.train_tokens_per_step < args.seq_len or args.train_tokens_per_step % args.seq_len
    ):
        return _error(
            f"--train-tokens-per-step {args.train_tokens_per_step} must be a positive multiple "
            f"of --seq-len {args.seq_len}"
        )
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    precision = args.precision
    if precision == "auto":
        precision = "bf16" if device.type == "cuda" else "fp32"
    autocast = autocast_for(device, precision)
    source = str(resolve_source(args.data)) if args.data else str(default_validation_source())
    max_tokens = None if args.max_tokens == 0 else args.max_tokens
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    progress = not args.no_progress
    options = dict(autocast=autocast, device=device, chunk_tokens=args.chunk_tokens)

    records: list[dict[str, Any]] = []
    taken: set[str] = set()
    for spec in args.specs:
        try:
            records += _one_model(args, spec, taken, source, max_tokens, out, progress, options)
        except (FileNotFoundError, ValueError, IndexError) as e:
            return _error(f"{spec}: {e}")
        # written after every model, so a long multi-model run keeps what it measured
        (out / "lens.json").write_text(json.dumps({"models": records}, indent=2) + "\n")
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    plot_lens_kl(records, out / "lens.png", log_y=args.log_y)
    print(f"wrote {out / 'lens.json'} and {out / 'lens.png'} ({device}, {precision})")
    return 0


def _one_model(
    args: argparse.Namespace,
    spec: str,
    taken: set[str],
    source: str,
    max_tokens: int | None,
    out: Path,
    progress: bool,
    options: dict[str, Any],
) -> list[dict[str, Any]]:
    """Load one model, train/load its tuned lens if asked, evaluate its lenses: the records."""
    from tying.lens import LogitLens, TunedLens, evaluate_lens
    from tying.lens.data import eval_window_count, window_batches
    from tying.models import load_any

    start = time.perf_counter()
    device = options["device"]
    lm = load_any(spec, tokenizer=args.tokenizer).to(device)
    lm.name = _unique(lm.name, taken)
    if lm.tokenizer is None:
        raise ValueError("the model has no tokenizer: pass --tokenizer")
    store = _open_store(source, lm.tokenizer, lm.vocab_size)
    n_eval = eval_window_count(store, args.seq_len, max_tokens)
    lenses: list[Any] = []
    if args.kind in ("logit", "both"):
        lenses.append(LogitLens())
    if args.kind in ("tuned", "both"):
        folder = out / "tuned" / lm.name
        if args.tuned_from is not None:
            folder = Path(args.tuned_from) / lm.name
        else:
            _train(args, lm, (source, store), n_eval, folder, progress, options)
        lens = TunedLens.load(folder, map_location=device)
        lens.check_compatible(lm)
        lenses.append(lens)
    records = []
    for lens in lenses:
        batches = _ByteCounter(
            window_batches(store, range(n_eval), args.seq_len, args.batch_size), lm.tokenizer
        )
        total = -(-n_eval // args.batch_size)
        result = evaluate_lens(lm, lens, batches, progress=progress, total=total, **options)
        result.bytes = batches.bytes
        record = result.to_dict(lm.name, lens.kind)
        records.append(record)
        print(
            f"{lm.name} ({lens.kind} lens): {record['tokens']} tokens, KL bits/token "
            + " ".join(f"{v:.3f}" for v in record["kl"])
        )
    print(f"{lm.name}: {time.perf_counter() - start:.1f} s")
    return records


def _train(
    args: argparse.Namespace,
    lm: Any,
    data: tuple[str, Any],
    n_eval: int,
    folder: Path,
    progress: bool,
    options: dict[str, Any],
) -> None:
    """Train a tuned lens for `lm` and save it to `folder`; `data` = (eval source, its store)."""
    from tying.data.batches import num_windows
    from tying.lens import TunedLensTraining, train_tuned_lens
    from tying.lens.data import training_steps
    from tying.lens.tuned_lens import describe_training

    source, store = data
    if args.train_data is not None:
        from tying.data.corpus import resolve_source

        train_store = _open_store(str(resolve_source(args.train_data)), lm.tokenizer, lm.vocab_size)
        windows = range(num_windows(train_store.num_tokens, args.seq_len))
    else:
        train_store = store
        windows = range(n_eval, num_windows(store.num_tokens, args.seq_len))
    cfg = TunedLensTraining(
        steps=args.train_steps,
        tokens_per_step=args.train_tokens_per_step,
        optimizer=args.optimizer,
        lr=args.lr,
        seed=args.seed,
    )
    steps = training_steps(
        train_store,
        windows,
        args.seq_len,
        steps=cfg.steps,
        windows_per_step=cfg.tokens_per_step // args.seq_len,
        batch_size=args.batch_size,
        seed=cfg.seed,
    )
    print(f"{lm.name}: training a tuned lens, {describe_training(cfg)}")
    lens, history = train_tuned_lens(lm, steps, cfg, progress=progress, **options)
    lens.training_record["data"] = args.train_data or source
    lens.training_record["first_window"] = 0 if args.train_data else n_eval
    lens.training_record["seq_len"] = args.seq_len
    lens.save(folder)
    print(
        f"{lm.name}: tuned lens trained on {history.tokens} tokens, final training KL "
        f"{history.kl[-1]:.3f} bits/token (mean over entries 0..L-1), saved to {folder}"
    )
