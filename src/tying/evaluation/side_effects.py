"""`tying side-effects BASE UPDATED --out DIR [--adapter DIR]`: what an update changed besides
its target.

    report = run_side_effects(SideEffectsOptions("smollm2", "smollm2", adapter="runs/mbpp",
                                                 out="runs/mbpp-side-effects"))

BASE and UPDATED are SPECs (`tying.loader.load_any`); `adapter` applies an adapter to UPDATED
(checked against the base model it was trained on). Both must share the tokenizer. On texts
that have nothing to do with the update (WikiText-2 test and Gutenberg validation by default),
in windows of `seq_len` tokens, every position scored once (docs/metrics.md, "Side effects of
an update", defines each number):

    texts[NAME].kl_nats         mean over positions of KL(p_base ‖ p_updated), nats/token
    texts[NAME].delta_loss      mean CE of the next token under UPDATED − under BASE, nats/token
    texts[NAME].top1_agreement  share of positions where both models' most likely token agree
    texts[NAME].tokens          positions scored
    lens_kl_change              per residual entry (0 = embedding output, L = last), the logit
                                lens's KL(final ‖ lens) of UPDATED minus that of BASE,
                                bits/token (token-weighted over the texts)
    interface.before / .after   interface consistency (raw and effective) of BASE / UPDATED
    cross_task                  with --tasks: both models evaluated on the same seeded items
                                (lm-eval), accuracy change with an exact McNemar test, change
                                of the reference log-likelihood with a paired bootstrap

side_effects.json holds those keys and, beside them, per-text details (losses, per-window
values and bootstrap intervals, the lens profiles), interface_change, the run's options and
timings. The output folder is written whole at the end, or not at all.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from tying.adapters import apply_adapter, causal_lm_of
from tying.config import to_dict
from tying.data.batches import eval_batches
from tying.data.corpus import default_validation_source, prepare_store
from tying.devices import autocast_for, resolve_device, resolve_precision
from tying.errors import InvalidInputError, MissingFileError
from tying.evaluation.divergence import compare_chunks
from tying.evaluation.stats import mcnemar_exact, paired_bootstrap
from tying.lens.data import eval_window_count, window_batches
from tying.lens.evaluate import evaluate_lens
from tying.lens.logit_lens import LogitLens
from tying.loader import LoadedModel, load_any, safe_name, vocab_size_before_added_tokens
from tying.options.side_effects import DEFAULT_TEXTS
from tying.options.side_effects import SideEffectsOptions as SideEffectsOptions
from tying.outputs import check_output_folder, output_folder
from tying.paths import data_dir

log = logging.getLogger(__name__)

#: File name of the report in the output folder.
SIDE_EFFECTS_FILE = "side_effects.json"
#: The named texts: name -> function returning the file.
NAMED_TEXTS: dict[str, Callable[[], Path]] = {
    "wikitext-2": lambda: data_dir() / "corpus" / "wikitext-2" / "test.txt",
    "gutenberg-validation": default_validation_source,
}


@dataclass
class SideEffectsRun:
    """What `run_side_effects` measured and wrote."""

    report: dict[str, Any]
    json_path: Path


# ----------------------------------------------------------------------------- checks
def check_options(options: SideEffectsOptions) -> tuple[str, ...] | None:
    """Validate what needs no file or model; returns the task names (None: no tasks).

    Raises:
        ValueError / FileExistsError: what is wrong, in one line.
    """
    from tying.evaluation.evaluate import parse_tasks

    positive = (
        "seq_len",
        "batch_size",
        "vocab_chunk",
        "lens_chunk_tokens",
        "eval_batch_size",
        "bootstrap_resamples",
    )
    for name in positive:
        if int(getattr(options, name)) < 1:
            raise InvalidInputError(f"{name} must be >= 1, got {getattr(options, name)}")
    if options.max_tokens < 0 or options.lens_tokens < 0:
        raise InvalidInputError(
            "max_tokens and lens_tokens must be >= 0 (0: the whole text / no lens)"
        )
    if 0 < options.max_tokens < options.seq_len:
        raise InvalidInputError(
            f"max_tokens={options.max_tokens} is less than one window of seq_len="
            f"{options.seq_len}: raise max_tokens or lower seq_len"
        )
    if 0 < options.lens_tokens < options.seq_len:
        raise InvalidInputError(
            f"lens_tokens={options.lens_tokens} is less than one window of seq_len="
            f"{options.seq_len}: raise lens_tokens, or 0 for no lens"
        )
    if not options.texts:
        raise InvalidInputError(f"give at least one text (texts), e.g. {' '.join(DEFAULT_TEXTS)}")
    if options.limit is not None and (isinstance(options.limit, bool) or options.limit < 1):
        raise InvalidInputError(
            f"limit must be a positive number of items, got {options.limit}; omit it to "
            "evaluate every item"
        )
    resolve_precision(options.precision)
    check_output_folder(options.out, options.overwrite)
    return parse_tasks(options.tasks) if options.tasks else None


def text_sources(texts: list[str]) -> dict[str, Path]:
    """Name -> file of each text: the named texts, else the file itself (named by its stem).

    Raises:
        FileNotFoundError: a text file that does not exist.
        ValueError: two texts with one name.
    """
    sources: dict[str, Path] = {}
    for text in texts:
        if text in NAMED_TEXTS:
            name, path = text, Path(NAMED_TEXTS[text]())
        else:
            path = Path(text).expanduser()
            name = safe_name(path.name.split(".")[0])
        if not path.is_file():
            raise MissingFileError(
                f"text {text!r}: {path} not found; name one of {', '.join(NAMED_TEXTS)} (read "
                "from TYING_DATA_DIR) or give an existing file"
            )
        if name in sources:
            raise InvalidInputError(f"two texts are named {name!r}: rename one of the files")
        sources[name] = path
    return sources


# ----------------------------------------------------------------------------- models
@dataclass
class _Pair:
    base: LoadedModel
    updated: LoadedModel
    updated_causal: Any  # the transformers model of UPDATED (under the adapter, if any)


def load_pair(options: SideEffectsOptions) -> _Pair:
    """BASE and UPDATED (with the adapter applied), in eval mode on the CPU.

    Raises:
        ValueError: a model without tokenizer, two models with different tokenizers or
            vocabulary sizes, an adapter for another base model.
    """
    base = load_any(options.base)
    updated = load_any(options.updated)
    for spec, loaded in ((options.base, base), (options.updated, updated)):
        if loaded.tokenizer is None:
            raise InvalidInputError(
                f"model {spec} has no tokenizer: save one beside it (tokenizer.json) or compare "
                "folders that have one"
            )
    if base.tokenizer.hash != updated.tokenizer.hash or base.vocab_size != updated.vocab_size:
        raise InvalidInputError(
            f"{options.base} and {options.updated} do not share a tokenizer and vocabulary "
            f"(V = {base.vocab_size} vs {updated.vocab_size}): side effects compare two versions "
            "of one model"
        )
    causal = causal_lm_of(updated.model, eos_token_id=updated.tokenizer.eos_id)
    if options.adapter is not None:
        causal = apply_adapter(causal, options.adapter)  # LoRA injected into `updated` in place
    base.model.eval()
    updated.model.eval()
    return _Pair(base, updated, causal)


# ----------------------------------------------------------------------------- next-token effects
def _blocks(model: LoadedModel, hidden: Tensor, chunk: int) -> Iterator[tuple[int, Tensor]]:
    """Logit blocks of final hidden states, soft-capped as the model's head does."""
    cap = model.logit_softcap
    for v0, z in model.interface.logit_chunks(hidden, chunk):
        yield v0, (cap * torch.tanh(z / cap) if cap else z)


def _paired_blocks(
    base: Iterator[tuple[int, Tensor]],
    updated: Iterator[tuple[int, Tensor]],
    autocast: Callable[[], Any],
) -> Iterator[tuple[int, Tensor, Tensor]]:
    """(v0, base block, updated block), each pair computed inside the precision context (and
    only there: the context is left before the block is handed on)."""
    while True:
        with autocast():
            try:
                v0, zp = next(base)
                _, zq = next(updated)
            except StopIteration:
                return
        yield v0, zp, zq


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


@torch.no_grad()
def text_effects(
    pair: _Pair,
    store: Any,
    options: SideEffectsOptions,
    device: torch.device,
    autocast: Callable[[], Any],
) -> dict[str, Any]:
    """kl_nats, delta_loss, top1_agreement and tokens of one text, plus losses, per-window
    values and bootstrap intervals over windows (see the module docstring)."""
    max_tokens = options.max_tokens or None
    n_windows = eval_window_count(store, options.seq_len, max_tokens)
    batches = eval_batches(store, options.seq_len, options.batch_size, max_tokens)
    kl_w, ce_b_w, ce_u_w, agree_w = [], [], [], []
    total = math.ceil(n_windows / options.batch_size)
    for inputs, targets in tqdm(
        batches, total=total, disable=not options.progress, desc="side effects"
    ):
        inputs, targets = inputs.to(device), targets.to(device)
        with autocast():
            h_base = pair.base.model.final_hidden(inputs)
            h_upd = pair.updated.model.final_hidden(inputs)
        b, length = inputs.shape
        d = h_base.shape[-1]
        h_base, h_upd = h_base.reshape(-1, d), h_upd.reshape(-1, d)

        blocks = _paired_blocks(
            _blocks(pair.base, h_base, options.vocab_chunk),
            _blocks(pair.updated, h_upd, options.vocab_chunk),
            autocast,
        )
        result = compare_chunks(blocks, targets.reshape(-1))
        kl_w += result.kl_nats.reshape(b, length).mean(dim=1).tolist()
        ce_b_w += result.ce_base.reshape(b, length).mean(dim=1).tolist()
        ce_u_w += result.ce_updated.reshape(b, length).mean(dim=1).tolist()
        agree_w += result.agree.reshape(b, length).double().mean(dim=1).tolist()
    windows = len(kl_w)
    tokens = windows * options.seq_len
    delta_w = [u - b for b, u in zip(ce_b_w, ce_u_w)]
    zeros = [0.0] * windows

    def interval(values: list[float]) -> list[float]:
        boot = paired_bootstrap(
            zeros, values, n_resamples=options.bootstrap_resamples, seed=options.seed
        )
        return [boot.ci_low, boot.ci_high]

    return {  # windows hold seq_len positions each: the mean over windows is the token mean
        "kl_nats": _mean(kl_w),
        "delta_loss": _mean(delta_w),
        "top1_agreement": _mean(agree_w),
        "tokens": tokens,
        "loss_base": _mean(ce_b_w),
        "loss_updated": _mean(ce_u_w),
        "windows": windows,
        "seq_len": options.seq_len,
        "kl_nats_ci95": interval(kl_w),
        "delta_loss_ci95": interval(delta_w),
        "per_window": {
            "kl_nats": kl_w,
            "delta_loss": delta_w,
            "top1_agreement": agree_w,
        },
    }


def lens_profiles(
    pair: _Pair,
    store: Any,
    options: SideEffectsOptions,
    device: torch.device,
    autocast: Callable[[], Any],
) -> dict[str, Any] | None:
    """Logit-lens KL(final ‖ lens) per entry of both models on the first lens_tokens positions
    (bits/token), and their change (updated − base); None when lens_tokens is 0 or the models
    have different numbers of blocks."""
    if not options.lens_tokens or pair.base.n_entries != pair.updated.n_entries:
        return None
    n = eval_window_count(store, options.seq_len, options.lens_tokens)
    context = {"autocast": autocast, "device": device, "chunk_tokens": options.lens_chunk_tokens}
    profiles = {}
    for key, model in (("base", pair.base), ("updated", pair.updated)):
        batches = window_batches(store, range(n), options.seq_len, options.batch_size)
        profiles[key] = evaluate_lens(model, LogitLens(), batches, **context)
    base, updated = profiles["base"].kl, profiles["updated"].kl
    return {
        "unit": "bits/token",
        "tokens": profiles["base"].tokens,
        "base": base,
        "updated": updated,
        "change": [u - b for b, u in zip(base, updated)],
    }


# ----------------------------------------------------------------------------- interface
def interface_metrics(model: LoadedModel) -> dict[str, Any]:
    """Interface consistency of a model (`probe.json["consistency"]`: raw and effective)."""
    from tying.probe.matrices import interface_matrices
    from tying.probe.views import consistency_view

    return consistency_view(interface_matrices(model))


@torch.no_grad()
def interface_change(
    base: LoadedModel, updated: LoadedModel, old_rows: int | None = None
) -> dict[str, float | None]:
    """How far an update moved the interface (None where the shapes differ):

        E_rel_change     = ‖E_updated − E_base‖_F / ‖E_base‖_F          (all V rows)
        E_old_rel_change = the same over the rows of ids < old_rows      (the old tokens)

    and likewise `U_rel_change`, `U_old_rel_change` for U = W_outᵀ. `old_rows`: the
    vocabulary before `tying add-tokens` grew the base (None: every row is old).
    """
    e_b, u_b = base.interface.analysis_matrices()
    e_u, u_u = updated.interface.analysis_matrices()
    out: dict[str, float | None] = {}
    for name, before, after in (("E", e_b, e_u), ("U", u_b, u_u)):
        rows = before.shape[0] if old_rows is None else old_rows
        for key, part in (
            (f"{name}_rel_change", slice(None)),
            (f"{name}_old_rel_change", slice(0, rows)),
        ):
            if before.shape != after.shape:
                out[key] = None
                continue
            b, a = before[part].double(), after[part].double()
            out[key] = float(torch.linalg.norm(a - b) / torch.linalg.norm(b))
    return out


# ----------------------------------------------------------------------------- tasks
def cross_task(
    pair: _Pair, tasks: tuple[str, ...], options: SideEffectsOptions, folder: Path
) -> dict[str, Any]:
    """Both models on the same seeded items of `tasks` (results.json of each under
    folder/eval-base and folder/eval-updated), compared item by item."""
    from tying.evaluation.evaluate import EvaluateOptions, evaluate_model
    from tying.evaluation.harness import TyingLM
    from tying.evaluation.loading import hf_tokenizer_of

    tokenizer = hf_tokenizer_of(pair.base.tokenizer)
    precision = resolve_precision(options.precision, resolve_device(options.device))
    results = {}
    for key, spec, model, adapter in (
        ("base", options.base, causal_lm_of(pair.base.model, tokenizer.eos_token_id), None),
        ("updated", options.updated, pair.updated_causal, options.adapter),
    ):
        lm = TyingLM(
            model,
            tokenizer,
            batch_size=options.eval_batch_size,
            mixed_precision_dtype="bfloat16" if precision == "bf16" else None,
        )
        lm.loaded.spec, lm.loaded.adapter = spec, adapter
        results[key] = evaluate_model(
            EvaluateOptions(
                spec=spec,
                tasks=list(tasks),
                out=str(folder / f"eval-{key}"),
                adapter=adapter,
                limit=options.limit,
                seed=options.seed,
                batch_size=options.eval_batch_size,
                max_new_tokens=options.max_new_tokens,
                num_fewshot=options.num_fewshot,
                precision=options.precision,
                device=options.device,
            ),
            lm=lm,
        )
    return compare_results(
        results["base"],
        results["updated"],
        n_resamples=options.bootstrap_resamples,
        seed=options.seed,
    )


def compare_results(
    base: dict[str, Any], updated: dict[str, Any], *, n_resamples: int = 10000, seed: int = 0
) -> dict[str, Any]:
    """Two `tying evaluate` results on the same items, task by task (`cross_task`).

    Per task: both accuracies and intervals, the accuracy difference (updated − base) with the
    exact McNemar test, and the change of the reference log-likelihood per token with a paired
    bootstrap of the per-item values log p(ref_i) / tokens_i (docs/metrics.md §5).

    Args:
        base, updated: results.json dicts of the two models (`evaluate_model`).
        n_resamples: resamples of the bootstrap.
        seed: seed of the bootstrap.

    Raises:
        ValueError: a task of `base` missing from `updated`, or scored on other items.
    """
    out = {}
    for task, entry_b in base["tasks"].items():
        entry_u = updated["tasks"].get(task)
        if entry_u is None:
            raise InvalidInputError(f"{task} was evaluated for the base model only: evaluate both")
        items_b, items_u = entry_b["items"], entry_u["items"]
        if [i["id"] for i in items_b] != [i["id"] for i in items_u]:
            raise InvalidInputError(
                f"{task}: the two evaluations scored different items: use the same limit and seed"
            )
        test = mcnemar_exact([i["correct"] for i in items_b], [i["correct"] for i in items_u])
        record: dict[str, Any] = {
            "n": entry_b["n"],
            "base": {k: entry_b[k] for k in ("accuracy", "ci95", "ref_loglik_per_token")},
            "updated": {k: entry_u[k] for k in ("accuracy", "ci95", "ref_loglik_per_token")},
            "delta_accuracy": entry_u["accuracy"] - entry_b["accuracy"],
            "mcnemar": {
                "only_base": test.only_a,
                "only_updated": test.only_b,
                "p_value": test.p_value,
            },
        }
        if entry_b["ref_loglik_per_token"] is not None:
            per_b = [i["ref_loglik"] / i["ref_tokens"] for i in items_b]
            per_u = [i["ref_loglik"] / i["ref_tokens"] for i in items_u]
            boot = paired_bootstrap(per_b, per_u, n_resamples=n_resamples, seed=seed)
            record["delta_ref_loglik_per_token"] = (
                entry_u["ref_loglik_per_token"] - entry_b["ref_loglik_per_token"]
            )
            record["ref_loglik_bootstrap"] = {
                "mean_item_difference": boot.mean_difference,
                "ci95": [boot.ci_low, boot.ci_high],
                "p_value": boot.p_value,
            }
        out[task] = record
    return out


# ----------------------------------------------------------------------------- the run
def _weighted_change(lens: dict[str, dict[str, Any]]) -> list[float] | None:
    """Token-weighted mean over texts of the per-entry lens change."""
    if not lens:
        return None
    total = sum(p["tokens"] for p in lens.values())
    n = len(next(iter(lens.values()))["change"])
    return [sum(p["change"][i] * p["tokens"] for p in lens.values()) / total for i in range(n)]


def run_side_effects(options: SideEffectsOptions) -> SideEffectsRun:
    """Measure the side effects of an update and write out/side_effects.json (one INFO line
    per text on the `tying.evaluation.side_effects` logger).

    Raises:
        ValueError / FileNotFoundError / FileExistsError: bad options, a missing text or task
            file, a model without tokenizer, models with different tokenizers, an adapter for
            another base model (nothing is written).
    """
    started = time.time()
    tasks = check_options(options)
    sources = text_sources(options.texts)
    if tasks is not None:
        from tying.evaluation.evaluate import subset_indices

        for task in tasks:  # a missing or malformed task file fails before the models load
            subset_indices(task, options.limit, options.seed)
    device = resolve_device(options.device)
    precision = resolve_precision(options.precision, device)
    autocast = autocast_for(device, precision)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    pair = load_pair(options)
    pair.base.to(device)
    pair.updated.to(device)
    seconds["load"] = time.perf_counter() - t0

    texts: dict[str, Any] = {}
    lens: dict[str, Any] = {}
    for name, path in sources.items():
        t0 = time.perf_counter()
        store = prepare_store(
            path,
            pair.base.tokenizer,
            expected_vocab_size=pair.base.vocab_size,
            allow_padded_vocab=True,
            progress=False,
        )
        texts[name] = {"source": str(path), **text_effects(pair, store, options, device, autocast)}
        seconds[f"text:{name}"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        profile = lens_profiles(pair, store, options, device, autocast)
        if profile is not None:
            lens[name] = profile
            seconds[f"lens:{name}"] = time.perf_counter() - t0
        entry = texts[name]
        log.info(
            f"{name}: KL {entry['kl_nats']:.3g} nats/token, delta loss {entry['delta_loss']:+.4f} "
            f"nats/token, top-1 agreement {entry['top1_agreement']:.4f} ({entry['tokens']} tokens)"
        )
    t0 = time.perf_counter()
    interface = {"before": interface_metrics(pair.base), "after": interface_metrics(pair.updated)}
    change = interface_change(pair.base, pair.updated, vocab_size_before_added_tokens(options.base))
    seconds["interface"] = time.perf_counter() - t0
    report: dict[str, Any] = {
        "texts": texts,
        "lens_kl_change": _weighted_change(lens),
        "interface": interface,
        "interface_change": change,
        "lens": lens,
        "base": options.base,
        "updated": options.updated,
        "adapter": options.adapter,
    }
    with output_folder(options.out, overwrite=options.overwrite) as tmp:
        if tasks is not None:
            t0 = time.perf_counter()
            report["cross_task"] = cross_task(pair, tasks, options, tmp)
            seconds["tasks"] = time.perf_counter() - t0
        report["run"] = {
            "options": to_dict(options),
            "device": str(device),
            "precision": precision,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
            "seconds": {**seconds, "total": time.time() - started},
        }
        (tmp / SIDE_EFFECTS_FILE).write_text(json.dumps(report, indent=2) + "\n")
    return SideEffectsRun(report, Path(options.out) / SIDE_EFFECTS_FILE)
