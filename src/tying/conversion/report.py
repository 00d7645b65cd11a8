"""The record of a conversion: what was built from which teacher matrix, and what it cost."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ConversionReport:
    """What `tying.conversion.convert` did, for logs and (transformers) `config.tying["report"]`.

    Attributes:
        model_type: `config.model_type` of the converted model (our models: the class name).
        family: the adapter family ("llama", "gpt2", ...; our models: "interface-model").
        tie: "untied", "tt" or "pit".
        t_init: PIT's t_init, else None.
        source: the teacher matrix the interface was built from: "input" (E0),
            "output" (U0) or "both" (untied).
        teacher_tied: whether the teacher's E0 and U0 were one tensor.
        vocab_rows: V, rows of the embedding (= of the head).
        d_model: d.
        tokenizer_vocab: len(tokenizer), or None when no tokenizer was given.
        padded_rows: V - tokenizer_vocab: rows no tokenizer id reaches (kept,
            not dropped), or None.
        zero_rows: rows of the source matrix that are exactly zero.
        embed_scale: constant multiplier applied to embedding rows (Gemma3: sqrt(d)).
        output_bias: whether the head has a bias (carried by the interface).
        logit_softcap: soft-capping applied after the head, or None.
        dtype: dtype of the interface's tensors.
        notes: human-readable remarks (e.g. what an untied teacher loses under TT).
        centre: PIT: whether Z was built from the centred teacher (input bias).
        input_scale: PIT: the relative input scale r applied (None: no scale correction).
        gain_factor: the factor the final-norm gain was multiplied by (1.0: untouched).
        scale_search: PIT with input_scale="auto": {r: KL} measured on calibration text.
        fit: PIT with t_init="fit": the fit's summary (`tying.conversion.fit.FitReport`).
        step0: KL(teacher ‖ converted) and losses at step 0, when measured.
    """

    model_type: str
    family: str
    tie: str
    t_init: str | None
    source: str
    teacher_tied: bool
    vocab_rows: int
    d_model: int
    tokenizer_vocab: int | None
    padded_rows: int | None
    zero_rows: int
    embed_scale: float
    output_bias: bool
    logit_softcap: float | None
    dtype: str
    notes: list[str] = field(default_factory=list)
    centre: bool | None = None
    input_scale: float | None = None
    gain_factor: float | None = None
    scale_search: dict[str, float] | None = None
    fit: dict[str, Any] | None = None
    step0: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the fields."""
        return asdict(self)
