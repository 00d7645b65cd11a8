"""Convert a `transformers` causal LM to a token interface built from its own weights.

`convert(model, tie)` replaces, in place, the input embedding and the output
head by an `InterfaceEmbedding` and an `InterfaceHead` around ONE
`TokenInterface` registered as `model.tying_interface`. The rest of the
model is untouched, so `forward`, `generate`, `save_pretrained` and peft keep
working.

Teacher matrices: E0 = the input embedding weight (V×d, without any
embed_scale), U0 = the output head weight (V×d, `nn.Linear` layout); for a
tied teacher E0 and U0 are one tensor.

- "untied": Untied(E0, U0): logits unchanged (a tied teacher gets two copies).
- "tt": TransposeTying(E0) (or U0 with `source="output"`): unchanged logits
  for a tied teacher; an untied one loses the other matrix.
- "pit": a PseudoInverseTying from M = U0 or E0 (by `source`), see `PitOptions`.
  Since W_out·E = I_d, PIT keeps exactly one side of the teacher unless M has
  orthonormal columns: t_init="output" keeps the head (W_out = U0^T when
  M = U0), "input" keeps the embedding (E = E0 when M = E0), "identity" takes
  Z = polar factor of M and T = I; "fit" starts from "output" and fits T and
  the final-norm gain to the teacher on calibration text
  (`tying.hf.calibrate.fit_pit`). By default M follows t_init: U0 for
  "output" and "fit", E0 for "input" and "identity". Two options reduce the
  damage and keep W_out·E = I exactly: the centred memory (Z from M − 1μ^T,
  μ as input bias) and the scale correction (T/c with the final-norm gain ×c,
  so the head is unchanged while E moves to the teacher's scale).

transformers 5 ties `lm_head.weight` to the embedding by parameter name
(`_tied_weights_keys`, applied when `config.tie_word_embeddings` is true, in
`post_init`, `tie_weights` and `from_pretrained`). A converted model has
`config.tie_word_embeddings = False` and an empty instance-level
`_tied_weights_keys` (and `all_tied_weights_keys`), so those calls find
nothing to tie, even if the flag is switched back on. The wrappers own no
`weight` parameter that could be re-pointed, and `resize_token_embeddings`,
which would swap in a plain `nn.Embedding`, raises instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from tying.hf.adapters import Adapter, get_adapter
from tying.hf.modules import INTERFACE_ATTR, InterfaceEmbedding, InterfaceHead
from tying.hf.state import CONFIG_KEY, interface_record, tie_of
from tying.interface.base import TokenInterface
from tying.interface.factory import check_tie
from tying.interface.pit import T_INITS, PseudoInverseTying, teacher_factors
from tying.interface.transpose import TransposeTying
from tying.interface.untied import Untied

#: PIT initialisations of a converted teacher: the closed forms, and "fit".
PIT_INITS = (*T_INITS, "fit")
#: t_init used by `convert(tie="pit")` when none is given and calibration windows are:
#: "fit" measured best (docs/teacher.md). Without calibration windows the default is
#: the best closed form, CLOSED_FORM_T_INIT with the centred memory and scale correction.
DEFAULT_T_INIT = "fit"
#: The closed-form t_init used without calibration windows (and as the start of "fit").
CLOSED_FORM_T_INIT = "output"
#: Calibration tokens (the first windows) on which input_scale="auto" is searched.
SEARCH_TOKENS = 1024
#: Values of `input_scale` besides a positive number.
INPUT_SCALE_MODES = ("auto", "none")
#: Which teacher matrix seeds a TT or PIT interface.
SOURCES = ("input", "output")
#: Attribute of a converted model holding its ConversionReport.
REPORT_ATTR = "tying_report"


@dataclass
class PitOptions:
    """How `convert(tie="pit")` builds PIT from a pretrained teacher (CLI: `tying convert`).

    Attributes:
        t_init: "identity", "output", "input" (closed forms, `tying.interface.pit`) or
            "fit" ("output", then T and the final-norm gain fitted to the teacher on
            calibration text). None: "fit" when calibration windows are given, else "output".
        centre: build Z from the centred teacher (M − 1μ^T) and add μ (scaled like E)
            as a constant input row; keeps W_out·E = I exactly (Z^T 1 = 0).
        input_scale: the scale correction. A number r > 0: T is divided by c so that E
            sits at r times the teacher's scale in the bulk of its spectrum, and the
            final-norm gain is multiplied by the factor that keeps (output, fit) or
            rescales (identity, input) the head to the teacher's scale; "auto": r
            searched on the calibration windows (r = 1 without them); "none": no
            correction (T exactly H^p, final norm untouched).
    """

    t_init: str | None = None
    centre: bool = True
    input_scale: float | str = "auto"

    def __post_init__(self) -> None:
        if self.t_init is not None and self.t_init not in PIT_INITS:
            raise ValueError(f"t_init must be one of {PIT_INITS}, got {self.t_init!r}")
        scale = self.input_scale
        bad = f"input_scale must be a positive number, 'auto' or 'none', got {scale!r}"
        if isinstance(scale, str) and scale not in INPUT_SCALE_MODES:
            try:
                scale = float(scale)
            except ValueError:
                raise ValueError(bad) from None
            self.input_scale = scale
        if not isinstance(scale, str) and not scale > 0:
            raise ValueError(bad)


@dataclass
class ConversionReport:
    """What `convert` did, for logs and `config.tying["report"]`.

    Attributes:
        model_type: `config.model_type` of the converted model.
        family: the adapter family ("llama", "gpt2", ...).
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
        gain_factor: PIT: the factor the final-norm gain was multiplied by (1.0: untouched).
        scale_search: PIT with input_scale="auto": {r: KL} measured on calibration text.
        fit: PIT with t_init="fit": the fit's summary (`tying.hf.calibrate.FitReport`).
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


def _unwrap(model: nn.Module) -> nn.Module:
    """The transformers model inside a peft model or an HFCausalLM."""
    for _ in range(8):
        if callable(getattr(model, "get_base_model", None)):
            inner = model.get_base_model()
        else:
            inner = getattr(model, "hf_model", None)
        if not isinstance(inner, nn.Module) or inner is model:
            return model
        model = inner
    return model


def is_converted(model: nn.Module) -> bool:
    """Whether `model` (or the transformers model inside it) carries a token interface."""
    return isinstance(getattr(_unwrap(model), INTERFACE_ATTR, None), TokenInterface)


def interface_of(model: nn.Module) -> TokenInterface:
    """The `TokenInterface` of a converted model (also through peft or HFCausalLM wrappers).

    Raises:
        ValueError: the model was not converted.
    """
    inner = _unwrap(model)
    interface = getattr(inner, INTERFACE_ATTR, None)
    if not isinstance(interface, TokenInterface):
        raise ValueError(
            f"{type(inner).__name__} has no token interface: convert it first with "
            "tying.hf.convert(model, tie=...) or load a converted folder with tying.hf.from_pretrained"
        )
    return interface


def conversion_report(model: nn.Module) -> ConversionReport | None:
    """The ConversionReport of a converted model (None if it has none)."""
    return getattr(_unwrap(model), REPORT_ATTR, None)


def _teacher_matrices(adapter: Adapter, model: nn.Module) -> tuple[Tensor, Tensor, Tensor | None]:
    """E0 (V×d), U0 (V×d) and the head bias (V,) or None, detached."""
    embedding = adapter.input_embedding(model)
    head = adapter.output_head(model)
    E0 = getattr(embedding, "weight", None)
    U0 = getattr(head, "weight", None)
    if not isinstance(E0, Tensor) or E0.dim() != 2:
        raise ValueError(
            f"the input embedding {type(embedding).__name__} has no (V, d) weight to convert"
        )
    if not isinstance(U0, Tensor) or U0.shape != E0.shape:
        raise ValueError(
            f"the output head {type(head).__name__} must have a weight of shape {tuple(E0.shape)} "
            f"(the embedding's), got {None if U0 is None else tuple(U0.shape)}"
        )
    if E0.device.type == "meta":
        raise ValueError("the model's weights are on the meta device: load real weights first")
    bias = getattr(head, "bias", None)
    return E0.detach(), U0.detach(), (bias.detach() if isinstance(bias, Tensor) else None)


def _build_pit(
    M: Tensor,
    t_init: str,
    centre: bool,
    input_scale: float | None,
    bias: Tensor | None,
    options: dict[str, Any],
) -> tuple[PseudoInverseTying, float]:
    """PIT from teacher matrix M, built in float32 (float64 for float64 M), cast to M's dtype.

    Returns the interface and the factor the final-norm gain must be multiplied by
    (1.0 without scale correction).
    """
    work = torch.float64 if M.dtype == torch.float64 else torch.float32
    rank_rtol = options.pop("rank_rtol", None)
    factors = teacher_factors(
        M, t_init, centre=centre, input_scale=input_scale, rank_rtol=rank_rtol
    )
    pit = PseudoInverseTying(
        factors.Z.to(work),
        factors.L.to(work),
        bias=None if bias is None else bias.to(work),
        input_bias=None if factors.input_bias is None else factors.input_bias.to(work),
        **options,
    )
    gain = factors.gain_factor if input_scale is not None else 1.0
    return pit.to(device=M.device, dtype=M.dtype), gain


def _repair_pit(
    model: nn.Module,
    adapter: Adapter,
    report: ConversionReport,
    gain_factor: float,
    r0: float | None,
    options: PitOptions,
    captured: Any,
    fit_options: Any,
    progress: bool,
) -> None:
    """After installing a PIT interface: scale correction, input-scale search, fit; fill the report."""
    report.centre = options.centre
    if gain_factor != 1.0:
        adapter.scale_final_norm_(model, gain_factor)
    report.gain_factor = gain_factor
    report.input_scale = r0
    if options.input_scale == "auto" and r0 is not None and captured is not None:
        from tying.hf.calibrate import search_input_scale

        search = search_input_scale(model, captured.subset(SEARCH_TOKENS))
        report.input_scale = r0 * search.best
        report.gain_factor = gain_factor * search.best
        report.scale_search = {f"{r0 * f:.4g}": kl for f, kl in search.kl.items()}
    if report.t_init == "fit":
        from tying.hf.calibrate import FitOptions, fit_pit

        result = fit_pit(model, captured, fit_options or FitOptions(), progress=progress)
        report.fit = result.to_dict()


def install_interface(
    model: nn.Module, interface: TokenInterface, adapter: Adapter, embed_scale: float
) -> None:
    """Put `interface` in `model` in place of its embedding and head, and switch off HF tying.

    Registers the interface once as `model.tying_interface`, installs the two
    wrappers through the model's set_input_embeddings/set_output_embeddings,
    sets `config.tie_word_embeddings = False` and empties the tied-weight
    mappings transformers 5 consults (`_tied_weights_keys`, `all_tied_weights_keys`).
    """
    setattr(model, INTERFACE_ATTR, interface)
    interface._is_hf_initialized = True
    adapter.set_input_embedding(model, InterfaceEmbedding(interface, embed_scale))
    adapter.set_output_head(model, InterfaceHead(interface))
    model.config.tie_word_embeddings = False
    text_config = (
        model.config.get_text_config() if hasattr(model.config, "get_text_config") else None
    )
    if text_config is not None and text_config is not model.config:
        text_config.tie_word_embeddings = False
    for module in model.modules():
        if hasattr(module, "all_tied_weights_keys"):
            module.all_tied_weights_keys = {}
    model._tied_weights_keys = {}
    # transformers' resize would put a plain nn.Embedding back and silently drop the interface.
    model.resize_token_embeddings = _resize_unsupported


def _resize_unsupported(*args: Any, **kwargs: Any) -> None:
    """Stands in for `resize_token_embeddings` on converted models."""
    raise NotImplementedError(
        "resize_token_embeddings is not supported on a model converted by tying.hf: resize the "
        "teacher before converting (model.resize_token_embeddings(n), then tying.hf.convert)"
    )


def convert(
    model: nn.Module,
    tie: str = "pit",
    *,
    t_init: str | None = None,
    source: str | None = None,
    tokenizer: Any = None,
    centre: bool | None = None,
    input_scale: float | str | None = None,
    calibration: Sequence[tuple[Tensor, Tensor]] | Any = None,
    measure: Sequence[tuple[Tensor, Tensor]] | Any = None,
    fit_options: Any = None,
    progress: bool = False,
    **interface_options: Any,
) -> ConversionReport:
    """Replace, in place, the embedding and head of a transformers causal LM by a token interface.

    Args:
        model: a `transformers` causal LM of a supported architecture
            (`tying.hf.adapters.supported_model_types()`), not yet converted.
        tie: "untied", "tt" or "pit".
        t_init: PIT only (`PitOptions.t_init`): "output" (keep the teacher's head),
            "input" (keep its embedding), "identity" (T = I) or "fit". Default:
            "fit" with calibration windows, else "output".
        source: TT/PIT only: the teacher matrix the interface is built from,
            "input" (E0) or "output" (U0). Default: "input" for TT; for PIT
            "output" when t_init is "output" or "fit", else "input". Irrelevant for
            tied teachers.
        tokenizer: optional tokenizer; len(tokenizer) is checked against the
            embedding rows and padded rows are reported.
        centre: PIT only (`PitOptions.centre`, default True).
        input_scale: PIT only (`PitOptions.input_scale`, default "auto").
        calibration: PIT only: (inputs, targets) windows (B, T) of calibration text, or
            their `tying.hf.calibrate.TeacherCapture` (taken on this model before
            conversion), used by input_scale="auto" (its first 1,024 tokens) and t_init="fit".
        measure: optional held-out windows (or their capture); the step-0
            KL(teacher ‖ converted) on them goes into the report (`report.step0`).
        fit_options: `tying.hf.calibrate.FitOptions` for t_init="fit" (default: its defaults).
        progress: show progress bars (scale search, fit).
        interface_options: constructor keyword arguments of the interface
            (PIT: trainable_z, diag_activation, diag_clamp, retraction_eps,
            rank_rtol, loss_chunk_size; TT: input_grad_scale, loss_chunk_size;
            untied: loss_chunk_size).

    Returns:
        The ConversionReport (also kept as `model.tying_report` and, as a dict,
        in `model.config.tying["report"]`).

    Raises:
        ValueError: unsupported architecture, model already converted, bad
            option, a tokenizer larger than the embedding, or (PIT) a
            rank-deficient teacher matrix.
    """
    check_tie(tie)
    adapter = get_adapter(model)
    if is_converted(model):
        raise ValueError(
            "this model is already converted (it has model.tying_interface); export it with "
            "tying.hf.export and reload it to convert again"
        )
    if tie != "pit" and t_init is not None:
        raise ValueError(f"t_init applies to tie='pit' only, got tie={tie!r}")
    if tie != "pit" and (centre is not None or input_scale is not None or calibration):
        raise ValueError(
            f"centre, input_scale and calibration apply to tie='pit' only, got tie={tie!r}"
        )
    pit_options = PitOptions(
        t_init=t_init,
        centre=True if centre is None else centre,
        input_scale="auto" if input_scale is None else input_scale,
    )
    if source is not None and source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES} or None, got {source!r}")
    if tie == "untied" and source is not None:
        raise ValueError(
            "source applies to tie='tt' or 'pit'; 'untied' keeps both teacher matrices"
        )

    E0, U0, bias = _teacher_matrices(adapter, model)
    V, d = E0.shape
    teacher_tied = E0.data_ptr() == U0.data_ptr()
    embed_scale = adapter.scale_fn(model, adapter.input_embedding(model))
    notes: list[str] = []

    tokenizer_vocab = len(tokenizer) if tokenizer is not None else None
    padded_rows = None
    if tokenizer_vocab is not None:
        if tokenizer_vocab > V:
            raise ValueError(
                f"the tokenizer has {tokenizer_vocab} tokens but the embedding has only {V} rows: "
                "ids past row V-1 cannot be embedded; pass the tokenizer that belongs to this model"
            )
        padded_rows = V - tokenizer_vocab
        if padded_rows:
            notes.append(
                f"{padded_rows} padded rows (ids {tokenizer_vocab}..{V - 1}) are not produced by the "
                "tokenizer; they are kept so every model id stays valid"
            )

    options = dict(interface_options)
    if tie == "untied":
        used, source_name = E0, "both"
        interface: TokenInterface = Untied(E0, U0, bias=bias, **options)
        if teacher_tied:
            notes.append("tied teacher: E and W_out start as two equal copies and train apart")
    elif tie == "tt":
        source_name = source or "input"
        used = E0 if source_name == "input" else U0
        interface = TransposeTying(used, bias=bias, **options)
        if not teacher_tied:
            notes.append(
                f"untied teacher: TT keeps its {source_name} matrix for both sides; the other "
                "one is dropped and logits change"
            )
    else:
        t_init = pit_options.t_init or (DEFAULT_T_INIT if calibration else CLOSED_FORM_T_INIT)
        if t_init == "fit" and not calibration:
            raise ValueError(
                "t_init='fit' fits T to the teacher on calibration text: pass calibration="
                "[(inputs, targets), ...] windows (tying convert and tying train do), or "
                f"choose a closed form from {T_INITS}"
            )
        closed_form = CLOSED_FORM_T_INIT if t_init == "fit" else t_init
        if pit_options.centre and adapter.logit_softcap(model) is not None:
            pit_options.centre = False
            notes.append(
                "soft-capped logits: the centred memory shifts every logit of a position by "
                "the same amount, which tanh soft-capping does not ignore; built uncentred"
            )
        source_name = source or ("output" if closed_form == "output" else "input")
        used = E0 if source_name == "input" else U0
        scale = pit_options.input_scale
        r0 = None if scale == "none" else (1.0 if scale == "auto" else float(scale))
        interface, gain_factor = _build_pit(
            used, closed_form, pit_options.centre, r0, bias, options
        )
        if used.dtype in (torch.float16, torch.bfloat16):
            notes.append(
                f"Z is stored in {used.dtype}: its columns are orthonormal only to that precision; "
                "load the model in float32 to convert exactly"
            )
        if gain_factor != 1.0 and not adapter.final_norm_parameters(model):
            if scale != "auto":
                raise ValueError(
                    f"input_scale={scale!r} needs a final-norm gain to keep the head, and this "
                    f"{adapter.family} model's final norm has none: use input_scale='none'"
                )
            notes.append("the final norm has no gain: no scale correction (input_scale='none')")
            interface, gain_factor = _build_pit(
                used, closed_form, pit_options.centre, None, bias, options
            )
            r0 = None
    zero_rows = int((used == 0).all(dim=1).sum()) if used.numel() else 0
    zero_rows = int((used == 0).all(dim=1).sum()) if used.numel() else 0

    captured = measured = None
    if (tie == "pit" and calibration) or measure:
        from tying.hf.calibrate import TeacherCapture, capture_teacher

        def captured_of(windows: Any) -> TeacherCapture:
            return (
                windows if isinstance(windows, TeacherCapture) else capture_teacher(model, windows)
            )

        captured = captured_of(calibration) if tie == "pit" and calibration else None
        measured = captured_of(measure) if measure else None

    report = ConversionReport(
        model_type=model.config.model_type,
        family=adapter.family,
        tie=tie_of(interface),
        t_init=t_init if tie == "pit" else None,
        source=source_name,
        teacher_tied=bool(teacher_tied),
        vocab_rows=int(V),
        d_model=int(d),
        tokenizer_vocab=tokenizer_vocab,
        padded_rows=padded_rows,
        zero_rows=zero_rows,
        embed_scale=float(embed_scale),
        output_bias=bias is not None,
        logit_softcap=adapter.logit_softcap(model),
        dtype=str(interface.z.dtype if tie == "pit" else used.dtype).removeprefix("torch."),
        notes=notes,
    )
    install_interface(model, interface, adapter, embed_scale)
    if tie == "pit":
        _repair_pit(
            model, adapter, report, gain_factor, r0, pit_options, captured, fit_options, progress
        )
    if measured is not None:
        from tying.hf.calibrate import step0_kl

        report.step0 = step0_kl(model, measured)
    record = interface_record(interface, embed_scale)
    record["report"] = report.to_dict()
    setattr(model.config, CONFIG_KEY, record)
    setattr(model, REPORT_ATTR, report)
    return report
