"""`tying lens`: logit and tuned lenses of one or more models, as lens.json and lens.png.

    records = run_lens(LensOptions(specs=["smollm2"], out="lens-out", kind="both"))

lens.json = {"models": [{"name", "kind", "unit": "bits/token", "tokens", "kl": [one float per
entry], "bytes", "kl_bits_per_byte"}]} (entry 0 = embedding output, entry i = output of block
i, the last entry = the model's own distribution, KL 0). A tuned lens is trained on windows
after the evaluation windows (or on `train_data`), saved under OUT/tuned/<name>/ and reloaded
from there for the evaluation. lens.json is rewritten after every model, so a long run keeps
what it measured.
"""

from __future__ import annotations

import gc
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tying.data.batches import num_windows
from tying.data.corpus import default_validation_source, prepare_store, resolve_source
from tying.devices import autocast_for, resolve_device, resolve_precision
from tying.errors import InvalidInputError
from tying.lens.data import eval_window_count, text_bytes, training_steps, window_batches
from tying.lens.evaluate import evaluate_lens
from tying.lens.logit_lens import LogitLens
from tying.lens.plots import plot_lens_kl
from tying.lens.tuned_lens import TunedLens, TunedLensTraining, describe_training, train_tuned_lens
from tying.loader import LoadedModel, load_any
from tying.options.lens import LensOptions as LensOptions
from tying.options.lens import TraceOptions as TraceOptions

log = logging.getLogger(__name__)


@dataclass
class LensRun:
    """What `run_lens` wrote: the lens.json records and the files."""

    records: list[dict[str, Any]]
    json_path: Path
    plot_path: Path
    device: str
    precision: str
    timings_s: dict[str, float] = field(default_factory=dict)


class _ByteCounter:
    """Wraps eval batches and adds up the UTF-8 bytes of their text."""

    def __init__(self, batches: Iterator[Any], tokenizer: Any) -> None:
        self.batches, self.tokenizer, self.bytes = batches, tokenizer, 0

    def __iter__(self) -> Iterator[Any]:
        for batch in self.batches:
            self.bytes += text_bytes(self.tokenizer, batch)
            yield batch


def _unique(name: str, taken: set[str]) -> str:
    candidate, i = name, 2
    while candidate in taken:
        candidate, i = f"{name}-{i}", i + 1
    taken.add(candidate)
    return candidate


def run_lens(options: LensOptions) -> LensRun:
    """Evaluate the lenses of every model in `options.specs` (see the module docstring); one
    INFO line per lens and model on the `tying.lens.pipeline` logger.

    Raises:
        ValueError / FileNotFoundError: a model that does not load, has no tokenizer, or a
            text that is too short; the models measured before are kept in lens.json.
    """
    device = resolve_device(options.device)
    precision = resolve_precision(options.precision, device)
    context = {"precision": precision, "device": device, "chunk_tokens": options.chunk_tokens}
    source = str(resolve_source(options.data)) if options.data else str(default_validation_source())
    out = Path(options.out)
    records: list[dict[str, Any]] = []
    taken: set[str] = set()
    timings: dict[str, float] = {}
    json_path = out / "lens.json"
    for spec in options.specs:
        start = time.perf_counter()
        lm = load_any(spec, tokenizer=options.tokenizer).to(device)
        out.mkdir(parents=True, exist_ok=True)  # once a model loaded: a failed start writes nothing
        lm.name = _unique(lm.name, taken)
        records += _one_model(options, lm, source, out, context)
        timings[lm.name] = time.perf_counter() - start
        log.info("%s: %.1f s", lm.name, timings[lm.name])
        json_path.write_text(json.dumps({"models": records}, indent=2) + "\n")
        del lm
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    plot_path = plot_lens_kl(records, out / "lens.png", log_y=options.log_y)
    return LensRun(records, json_path, Path(plot_path), str(device), precision, timings)


def _one_model(
    options: LensOptions,
    lm: LoadedModel,
    source: str,
    out: Path,
    context: dict[str, Any],
) -> list[dict[str, Any]]:
    """Train/load the tuned lens of one model if asked, evaluate its lenses: the records."""
    if lm.tokenizer is None:
        raise InvalidInputError(
            f"{lm.spec}: the model has no tokenizer: set tokenizer (a tokenizer name or folder)"
        )
    store = prepare_store(
        source,
        lm.tokenizer,
        expected_vocab_size=lm.vocab_size,
        allow_padded_vocab=True,
        progress=False,
    )
    max_tokens = None if options.max_tokens == 0 else options.max_tokens
    n_eval = eval_window_count(store, options.seq_len, max_tokens)
    lenses: list[Any] = []
    if options.kind in ("logit", "both"):
        lenses.append(LogitLens())
    if options.kind in ("tuned", "both"):
        folder = out / "tuned" / lm.name
        if options.tuned_from is not None:
            folder = Path(options.tuned_from) / lm.name
        else:
            _train(options, lm, (source, store), n_eval, folder, context)
        lens = TunedLens.load(folder, map_location=context["device"])
        lens.check_compatible(lm)
        lenses.append(lens)
    records = []
    for lens in lenses:
        batches = _ByteCounter(
            window_batches(store, range(n_eval), options.seq_len, options.batch_size), lm.tokenizer
        )
        total = -(-n_eval // options.batch_size)
        result = evaluate_lens(lm, lens, batches, progress=options.progress, total=total, **context)
        result.bytes = batches.bytes
        record = result.to_dict(lm.name, lens.kind)
        records.append(record)
        log.info(
            f"{lm.name} ({lens.kind} lens): {record['tokens']} tokens, KL bits/token "
            + " ".join(f"{v:.3f}" for v in record["kl"])
        )
    return records


def _train(
    options: LensOptions,
    lm: LoadedModel,
    data: tuple[str, Any],
    n_eval: int,
    folder: Path,
    context: dict[str, Any],
) -> None:
    """Train a tuned lens for `lm` and save it to `folder`; `data` = (eval source, its store)."""
    source, store = data
    if options.train_data is not None:
        train_store = prepare_store(
            resolve_source(options.train_data),
            lm.tokenizer,
            expected_vocab_size=lm.vocab_size,
            allow_padded_vocab=True,
            progress=False,
        )
        windows = range(num_windows(train_store.num_tokens, options.seq_len))
    else:
        train_store = store
        windows = range(n_eval, num_windows(store.num_tokens, options.seq_len))
    cfg = TunedLensTraining(
        steps=options.train_steps,
        tokens_per_step=options.train_tokens_per_step,
        optimizer=options.optimizer,
        lr=options.lr,
        seed=options.seed,
    )
    steps = training_steps(
        train_store,
        windows,
        options.seq_len,
        steps=cfg.steps,
        windows_per_step=cfg.tokens_per_step // options.seq_len,
        batch_size=options.batch_size,
        seed=cfg.seed,
    )
    log.info(f"{lm.name}: training a tuned lens, {describe_training(cfg)}")
    lens, history = train_tuned_lens(lm, steps, cfg, progress=options.progress, **context)
    lens.training_record["data"] = options.train_data or source
    lens.training_record["first_window"] = 0 if options.train_data else n_eval
    lens.training_record["seq_len"] = options.seq_len
    lens.save(folder)
    log.info(
        f"{lm.name}: tuned lens trained on {history.tokens} tokens, final training KL "
        f"{history.kl[-1]:.3f} bits/token (mean over entries 0..L-1), saved to {folder}"
    )


@dataclass
class TraceRun:
    """What `run_trace` computed and wrote."""

    trace: Any
    table: str
    json_path: Path
    plot_path: Path


def run_trace(options: TraceOptions) -> TraceRun:
    """Trace the input- and output-side anchors of one token through every entry.

    Raises:
        ValueError: an empty prompt, a model without tokenizer, a position out of range.
    """
    from tying.lens.trace import format_trace, plot_trace, transition_trace

    if not options.prompt:
        raise InvalidInputError("give the text to trace (prompt)")
    device = resolve_device(options.device)
    lm = load_any(options.spec, tokenizer=options.tokenizer).to(device)
    tokenizer = lm.tokenizer
    if tokenizer is None:
        raise InvalidInputError(
            f"{options.spec} has no tokenizer: set tokenizer (a tokenizer name or folder)"
        )
    ids = tokenizer.encode(options.prompt)
    if not ids:
        raise InvalidInputError("the prompt encodes to no tokens")
    trace = transition_trace(
        lm,
        torch.tensor(ids),
        k=options.top_k,
        position=options.position,
        candidates=min(tokenizer.vocab_size, lm.vocab_size),
        autocast=autocast_for(device, options.precision),
    )

    def decode(i: int) -> str:
        return tokenizer.decode([i])

    out = Path(options.out) if options.out else Path(f"trace-{lm.name}")
    out.mkdir(parents=True, exist_ok=True)
    record = {"prompt": options.prompt, **trace.to_dict(decode)}
    json_path = out / "trace.json"
    json_path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    plot_path = out / "trace.png"
    plot_trace(trace, decode, plot_path)
    return TraceRun(trace, format_trace(trace, decode), json_path, plot_path)
