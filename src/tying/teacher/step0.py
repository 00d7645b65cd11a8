"""How far does each conversion move a pretrained teacher before any training (step 0)?

For a teacher causal LM and held-out text, the loss (nats/token) and the KL
divergence KL(teacher ‖ converted) (nats/token, averaged over positions) right
after conversion, for TT and for PIT with each option of `tying.hf.convert`:
the raw closed forms (`identity`, `output`, `input`: T = H^p, nothing else),
the scale correction (E at the teacher's scale, the head kept by the
final-norm gain), the centred memory (mean row as input bias), the searched
scale, and `fit`.

PIT forces W_out E = I_d, so it cannot keep both the teacher's embedding and
its head (docs/teacher.md): "output" keeps the head (W_out = E0^T) and replaces
the embedding by pinv(E0^T) = E0 (E0^T E0)^{-1}; "input" keeps the embedding and
replaces the head; "identity" replaces both by the orthonormal polar factor U of E0.

This module also turns text into the calibration and held-out windows a
conversion needs (`windows_from_source`) and runs `tying convert` end to end
(`convert_spec`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

Batch = tuple[Tensor, Tensor]

#: name -> keyword arguments of `tying.hf.convert` (the step-0 table's rows, in order).
RAW = {"centre": False, "input_scale": "none"}
VARIANTS: dict[str, dict[str, Any]] = {
    "tt": {"tie": "tt"},
    "pit/identity": {"tie": "pit", "t_init": "identity", **RAW},
    "pit/output": {"tie": "pit", "t_init": "output", **RAW},
    "pit/input": {"tie": "pit", "t_init": "input", **RAW},
    "pit/identity+scale": {"tie": "pit", "t_init": "identity", "centre": False, "input_scale": 1.0},
    "pit/output+scale": {"tie": "pit", "t_init": "output", "centre": False, "input_scale": 1.0},
    "pit/input+scale": {"tie": "pit", "t_init": "input", "centre": False, "input_scale": 1.0},
    "pit/output+centre": {"tie": "pit", "t_init": "output", "centre": True, "input_scale": "none"},
    "pit/output+scale+centre": {
        "tie": "pit",
        "t_init": "output",
        "centre": True,
        "input_scale": 1.0,
    },
    "pit/output+auto+centre": {
        "tie": "pit",
        "t_init": "output",
        "centre": True,
        "input_scale": "auto",
    },
    "pit/fit": {"tie": "pit", "t_init": "fit", "centre": True, "input_scale": "auto"},
}


def windows_from_source(
    source: str | Path,
    tokenizer: Any,
    *,
    tokens: int,
    seq_len: int = 256,
    batch_size: int = 1,
    shuffle_seed: int | None = None,
    max_documents: int | None = None,
    vocab_size: int | None = None,
) -> list[Batch]:
    """Windows (inputs, targets) of shape (batch_size, seq_len) holding ≥ `tokens` targets.

    Args:
        source: text (file, folder, glob, `hf:` spec or alias, see `tying.data.corpus`).
        tokenizer: a `tying.data.tokenizer.load_tokenizer` spec or tokenizer.
        tokens: target tokens wanted (rounded up to whole batches).
        seq_len: tokens per window.
        batch_size: windows per batch.
        shuffle_seed: None: the first windows in order (held-out measurement);
            a seed: windows in the shuffled order of that seed (calibration).
        max_documents: tokenize only the first documents of the source (cached shards).
        vocab_size: the model's V, checked against the shards.
    """
    from tying.data.batches import WindowSampler, eval_batches
    from tying.data.corpus import prepare_store

    store = prepare_store(
        source,
        tokenizer,
        expected_vocab_size=vocab_size,
        allow_padded_vocab=True,
        max_documents=max_documents,
        progress=False,
    )
    count = -(-tokens // (seq_len * batch_size))
    if shuffle_seed is None:
        return list(
            eval_batches(store, seq_len, batch_size, max_tokens=count * seq_len * batch_size)
        )
    sampler = WindowSampler(store, seq_len, batch_size, seed=shuffle_seed)
    return [sampler.next_batch() for _ in range(count)]


def conversion_table(
    teacher: nn.Module,
    measure: Sequence[Batch],
    calibration: Sequence[Batch] | None = None,
    variants: dict[str, dict[str, Any]] | None = None,
    fit_options: Any = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Loss and KL to the teacher at step 0 for each conversion in `variants`.

    Args:
        teacher: an unconverted transformers causal LM, or an `InterfaceModel` such as our
            decoder (converted by `convert_interface_model`); left unchanged.
        measure: held-out (inputs, targets) windows (B, T), targets shifted by one.
        calibration: windows for the options that search or fit (a variant that needs them
            is skipped without).
        variants: name -> `tying.hf.convert` keyword arguments (default `VARIANTS`).
        fit_options: `tying.hf.calibrate.FitOptions` of the "fit" variants.
        progress: progress bars of the fits.

    Returns:
        {"teacher": {"loss", "ppl"}, "variants": {name: {"loss", "ppl", "kl", "options",
         "input_scale", "gain_factor", "scale_search", "fit", "elapsed_s"}}, "tokens": n,
         "unit": "nats/token"}
    """
    import time

    from tying.hf.adapters import ADAPTERS
    from tying.hf.calibrate import capture_teacher
    from tying.hf.convert import convert

    def is_transformers(model: nn.Module) -> bool:
        return getattr(getattr(model, "config", None), "model_type", None) in ADAPTERS

    teacher.eval()
    measured = capture_teacher(teacher, measure)
    captured = capture_teacher(teacher, calibration) if calibration else None
    rows: dict[str, Any] = {}
    teacher_loss = None
    for name, options in (variants or VARIANTS).items():
        needs = options.get("t_init") == "fit" or options.get("input_scale") == "auto"
        if needs and captured is None:
            continue
        model = copy.deepcopy(teacher)
        t0 = time.perf_counter()
        kwargs = dict(options)
        tie = kwargs.pop("tie")
        if captured is not None:  # used only by the conversions that ask for data
            kwargs.update(calibration=captured, fit_options=fit_options, progress=progress)
        if is_transformers(model):
            report = convert(model, tie, measure=measured, **kwargs).to_dict()
        else:  # our decoder, or another InterfaceModel
            report = convert_interface_model(model, tie, measure=measured, **kwargs)
        step0 = report["step0"] or {}
        teacher_loss = step0.get("teacher_loss", teacher_loss)
        rows[name] = {
            "loss": step0.get("loss"),
            "ppl": math.exp(min(step0.get("loss", 0.0), 700)),
            "kl": step0.get("kl"),
            "options": options,
            "input_scale": report["input_scale"],
            "gain_factor": report["gain_factor"],
            "scale_search": report["scale_search"],
            "fit": report["fit"],
            "notes": report["notes"],
            "elapsed_s": round(time.perf_counter() - t0, 2),
        }
        del model
    return {
        "teacher": {
            "loss": teacher_loss,
            "ppl": math.exp(teacher_loss) if teacher_loss is not None else None,
        },
        "variants": rows,
        "tokens": measured.tokens,
        "calibration_tokens": captured.tokens if captured is not None else 0,
        "unit": "nats/token",
    }


def convert_interface_model(
    model: nn.Module,
    tie: str = "pit",
    *,
    calibration: Any = None,
    measure: Any = None,
    fit_options: Any = None,
    progress: bool = False,
    **options: Any,
) -> dict[str, Any]:
    """`tying.hf.convert` for a model that is not a transformers one, such as our decoder.

    Replaces, in place, `model.interface` (an `InterfaceModel`, e.g. a `tying.decoder.Decoder`
    trained with any tie) by interface `tie` built from its current matrices
    (`from_teacher_matrices`), then does what the conversion's settings ask, as
    `tying.hf.convert` does: multiply the final-norm gain, search the input scale and fit on
    the calibration windows (or capture), and measure the step-0 KL on `measure`.

    Returns:
        {"t_init", "centre", "input_scale", "gain_factor", "scale_search", "fit", "notes",
         "step0"} (the ConversionReport fields the step-0 table reads).
    """
    from tying.hf.calibrate import (
        FitOptions,
        TeacherCapture,
        capture_teacher,
        fit_pit,
        scale_final_norm_,
        search_input_scale,
        step0_kl,
    )
    from tying.hf.convert import SEARCH_TOKENS
    from tying.interface import interface_class
    from tying.interface.registry import check_options

    cls = interface_class(tie)
    options = {k: v for k, v in options.items() if v is not None}
    check_options(tie, cls.from_teacher_matrices, options, "conversion")
    old = model.interface
    with torch.no_grad():
        E0 = old.embedding_matrix().detach().clone()
        U0 = E0 if old.shares_matrix else old.unembedding_matrix().detach().clone()
    bias = old.bias.detach().clone() if old.bias is not None else None

    def capture(windows: Any) -> TeacherCapture:
        return windows if isinstance(windows, TeacherCapture) else capture_teacher(model, windows)

    measured = capture(measure) if measure else None
    built = cls.from_teacher_matrices(E0, U0, bias=bias, teacher_tied=old.shares_matrix, **options)
    settings = built.settings
    if settings.get("fit") and not calibration:
        if settings["fit"] == "requested":
            raise ValueError("t_init='fit' needs calibration windows")
        settings["t_init"], settings["fit"] = settings["closed_form"], None
    wants_data = settings.get("fit") or settings.get("search_input_scale")
    captured = capture(calibration) if calibration and wants_data else None
    model.interface = built.interface
    out: dict[str, Any] = {
        "t_init": settings.get("t_init"),
        "centre": settings.get("centre"),
        "input_scale": settings.get("input_scale"),
        "gain_factor": settings.get("gain_factor"),
        "scale_search": None,
        "fit": None,
        "notes": list(built.notes),
        "step0": None,
    }
    gain = float(settings.get("gain_factor", 1.0))
    if gain != 1.0:
        scale_final_norm_(model, gain)
    r0 = settings.get("input_scale")
    if settings.get("search_input_scale") and r0 is not None and captured is not None:
        search = search_input_scale(model, captured.subset(SEARCH_TOKENS))
        out["input_scale"], out["gain_factor"] = r0 * search.best, gain * search.best
        out["scale_search"] = {f"{r0 * f:.4g}": kl for f, kl in search.kl.items()}
    if settings.get("fit") and captured is not None:
        out["fit"] = fit_pit(
            model, captured, fit_options or FitOptions(), progress=progress
        ).to_dict()
    if measured is not None:
        out["step0"] = step0_kl(model, measured)
    return out


def _text_tokenizer(spec: str, tokenizer: Any) -> Any:
    """The `TextTokenizer` `tying train` would use for `spec` (else the loaded one, wrapped)."""
    from tying.data.tokenizer import load_tokenizer
    from tying.loader import as_text_tokenizer

    try:
        return load_tokenizer(spec)
    except (FileNotFoundError, ValueError):
        if tokenizer is None:
            raise ValueError(
                f"{spec} has no tokenizer to cut calibration text with: save one next to the "
                "model, or use a closed form without data (input_scale=1, t_init=output)"
            ) from None
        return as_text_tokenizer(tokenizer, str(spec))


def convert_spec(
    spec: str,
    tie: str,
    *,
    dtype: torch.dtype = torch.float32,
    cache: bool = True,
    calibration_source: str | None = None,
    calibration_documents: int | None = 8,
    measure_source: str | None = None,
    step0_tokens: int = 2048,
    seq_len: int = 256,
    fit_options: Any = None,
    progress: bool = True,
    **convert_options: Any,
) -> tuple[nn.Module, Any, Any]:
    """`tying convert`: load `spec`, convert it with windows of real text, measure step 0.

    Conversions that need data (PIT's input_scale="auto" and t_init="fit", the defaults)
    get calibration windows from `calibration_source` (default: the Gutenberg training
    split, first `calibration_documents` books, shuffled windows), cut only when the
    conversion asks for them; the step-0 KL is measured on the first `step0_tokens`
    tokens of `measure_source` (default: Gutenberg validation), which the fit never sees.

    Returns:
        (converted model, tokenizer, ConversionReport).
    """
    from tying.data.corpus import default_train_source, default_validation_source
    from tying.hf.convert import convert
    from tying.hf.loading import load

    model, tokenizer = load(spec, dtype=dtype, cache=cache)
    V = int(model.get_input_embeddings().weight.shape[0])
    tok = _text_tokenizer(spec, tokenizer)

    def calibration(tokens: int) -> list[Batch]:
        return windows_from_source(
            calibration_source or default_train_source(),
            tok,
            tokens=tokens,
            seq_len=seq_len,
            shuffle_seed=0,
            max_documents=calibration_documents,
            vocab_size=V,
        )

    measure = None
    if step0_tokens > 0:
        measure = windows_from_source(
            measure_source or str(default_validation_source()),
            tok,
            tokens=step0_tokens,
            seq_len=seq_len,
            vocab_size=V,
        )
    report = convert(
        model,
        tie,
        tokenizer=tokenizer,
        calibration=calibration,
        measure=measure,
        fit_options=fit_options,
        progress=progress,
        **convert_options,
    )
    return model, tokenizer, report
