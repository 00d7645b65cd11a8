"""Step 0 of teacher mode on real text: the windows a conversion reads, and `tying convert`.

- `windows_from_source`: text (a file, folder, glob or `hf:` source) -> the calibration and
  held-out (inputs, targets) windows a conversion needs;
- `convert_spec`: `tying convert` end to end: resolve a model SPEC (a transformers model or a
  training run, `tying.train.resolve.resolve_model`), convert it with windows of real text,
  measure the step-0 KL.

The step-0 table itself (`conversion_table`, `VARIANTS`) and the conversion of our own
decoder (`convert_interface_model`) moved to `tying.conversion.table`; the old names here
warn until 0.3.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tying._compat import moved_name
from tying.adapters import causal_lm_of
from tying.conversion import FitOptions, convert
from tying.data.batches import WindowSampler, eval_batches
from tying.data.corpus import default_train_source, default_validation_source, prepare_store
from tying.data.tokenizer import TextTokenizer, load_tokenizer
from tying.errors import InvalidInputError
from tying.hf.native import hf_tokenizer_of
from tying.interface import TokenInterface
from tying.loader import as_text_tokenizer
from tying.train.resolve import resolve_model

Batch = tuple[Tensor, Tensor]
#: Names that moved to `tying.conversion.table` in 0.2 (they warn here until 0.3).
_MOVED = ("RAW", "VARIANTS", "conversion_table", "convert_interface_model")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        return moved_name(f"{__name__}.{name}", "tying.conversion.table", name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def text_tokenizer(spec: str, tokenizer: Any) -> Any:
    """The `TextTokenizer` `tying train` would use for `spec` (else the loaded one, wrapped)."""
    if isinstance(tokenizer, TextTokenizer):  # a training run's own
        return tokenizer
    try:
        return load_tokenizer(spec)
    except (FileNotFoundError, ValueError):
        if tokenizer is None:
            raise InvalidInputError(
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
    fit_options: FitOptions | None = None,
    progress: bool = True,
    **convert_options: Any,
) -> tuple[nn.Module, Any, Any]:
    """`tying convert`: load `spec`, convert it with windows of real text, measure step 0.

    Conversions that need data (PIT's input_scale="auto" and t_init="fit", the defaults)
    get calibration windows from `calibration_source` (default: the Gutenberg training
    split, first `calibration_documents` books, shuffled windows), cut only when the
    conversion asks for them; the step-0 KL is measured on the first `step0_tokens`
    tokens of `measure_source` (default: Gutenberg validation), which the fit never sees.

    `spec` is anything `tying.train.resolve.resolve_model` reads: a transformers model, or a
    training run of our decoder (converted on its own interface, returned as the
    `TyingForCausalLM` around it with its tokenizer as a transformers one, ready for
    `save_pretrained`).

    Returns:
        (converted model, tokenizer or None, ConversionReport).
    """
    resolved = resolve_model(spec, dtype, cache=cache)
    model, tokenizer = resolved.model, resolved.tokenizer
    V = _vocabulary_rows(model)
    tok = text_tokenizer(spec, tokenizer)
    if resolved.kind == "run":  # saved as a transformers tokenizer next to the model
        tokenizer = hf_tokenizer_of(tok)

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
    if resolved.kind == "run":
        model = causal_lm_of(model, eos_token_id=tok.eos_id)
    return model, tokenizer, report


def _vocabulary_rows(model: nn.Module) -> int:
    """V, the rows of a model's input embedding (or of its token interface)."""
    own = getattr(model, "interface", None)
    if isinstance(own, TokenInterface):
        return own.vocab_size
    return int(model.get_input_embeddings().weight.shape[0])
