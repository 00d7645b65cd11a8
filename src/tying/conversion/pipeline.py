"""Convert a pretrained model to a token interface built from its own weights, in place.

`convert(model, tie)` replaces the model's input embedding and output head by ONE
`TokenInterface` built from them; the rest of the model is untouched. The model is read
through its kind (`tying.conversion.model`): a transformers causal LM (its kind registered by
`tying.hf`, which also installs the interface there: `tying.hf.convert` is this function) or
an `InterfaceModel` such as our decoder (its `interface` replaced).

Teacher matrices: E0 = the input embedding (V×d, without any embed_scale), U0 = the output
head weight (V×d, `nn.Linear` layout); for a tied teacher E0 and U0 are one tensor.

- "untied": Untied(E0, U0): logits unchanged (a tied teacher gets two copies).
- "tt": TransposeTying(E0) (or U0 with `source="output"`): unchanged logits for a tied
  teacher; an untied one loses the other matrix.
- "pit": `tying.conversion.closed_form.pit_from_teacher_matrices` with M = U0 or E0 by
  `source`. Since W_out·E = I_d, PIT keeps exactly one side of the teacher unless M has
  orthonormal columns: t_init="output" keeps the head (W_out = U0^T when M = U0), "input"
  keeps the embedding (E = E0 when M = E0), "identity" takes Z = polar factor of M and T = I;
  "fit" (the default) starts from "output" and fits T and the final-norm gain to the teacher
  on calibration text (`tying.conversion.fit.fit_pit`). Two options reduce the damage and
  keep W_out·E = I exactly: the centred memory (Z from M − 1μ^T, μ as input bias) and the
  scale correction (T/c with the final-norm gain ×c, so the head is unchanged while E moves
  to the teacher's scale).

What a builder's `TeacherConversion.settings` ask of the model is done here, whatever the
interface: "gain_factor" (multiply the final-norm gain), "search_input_scale" (search the
scale on calibration text), "fit" (fit on calibration text), and "centre" (rebuilt uncentred
for a soft-capped head, where a common logit offset is not harmless).

The steps, in order: `_vocabulary` (tokenizer against rows), `_build` (the interface, rebuilt
where the model rules an option out), `_calibration` (windows only when the settings ask),
`_captures` (the teacher on them, before anything changes), `_report`, the kind's `install`,
`_finish` (gain, scale search, fit), the step-0 KL, the kind's `record`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor, nn

from tying.conversion.capture import TeacherCapture, capture_teacher, step0_kl
from tying.conversion.closed_form import PIT_INITS, teacher_builder
from tying.conversion.fit import FitOptions, fit_pit
from tying.conversion.model import Teacher, kind_of, parts_of
from tying.conversion.report import ConversionReport
from tying.conversion.scale import SEARCH_TOKENS, search_input_scale
from tying.errors import InvalidInputError
from tying.interface import interface_class, tie_of
from tying.interface.base import TeacherConversion
from tying.interface.registry import check_options

Windows = Sequence[tuple[Tensor, Tensor]]


def _vocabulary(tokenizer: Any, V: int) -> tuple[int | None, int | None, list[str]]:
    """(len(tokenizer), padded rows V − len(tokenizer), notes), or ValueError if it is larger."""
    if tokenizer is None:
        return None, None, []
    tokenizer_vocab = len(tokenizer)
    if tokenizer_vocab > V:
        raise InvalidInputError(
            f"the tokenizer has {tokenizer_vocab} tokens but the embedding has only {V} rows: "
            "ids past row V-1 cannot be embedded; pass the tokenizer that belongs to this model"
        )
    padded_rows = V - tokenizer_vocab
    notes = []
    if padded_rows:
        notes.append(
            f"{padded_rows} padded rows (ids {tokenizer_vocab}..{V - 1}) are not produced by the "
            "tokenizer; they are kept so every model id stays valid"
        )
    return tokenizer_vocab, padded_rows, notes


def _build(
    teacher: Teacher,
    build: Callable[..., TeacherConversion],
    source: str | None,
    options: dict[str, Any],
    notes: list[str],
) -> TeacherConversion:
    """The interface from the teacher's matrices; rebuilt when the model rules an option out.

    A soft-capped head is built uncentred (tanh does not ignore a common logit offset); a
    final norm without a gain gets no scale correction (input_scale="auto" falls back to
    "none", an explicit r raises). `options` and `notes` are updated in place.
    """

    def built_with() -> TeacherConversion:
        return build(
            teacher.E0,
            teacher.U0,
            bias=teacher.bias,
            teacher_tied=teacher.tied,
            source=source,
            **options,
        )

    built = built_with()
    if built.settings.get("centre") and teacher.softcap is not None:
        options["centre"] = False
        built = built_with()
        notes.append(
            "soft-capped logits: the centred memory shifts every logit of a position by "
            "the same amount, which tanh soft-capping does not ignore; built uncentred"
        )
    if built.settings.get("gain_factor", 1.0) != 1.0 and not teacher.norm_has_gain:
        if not built.settings.get("search_input_scale"):
            raise InvalidInputError(
                f"input_scale={options.get('input_scale')!r} needs a final-norm gain to keep the "
                f"head, and this {teacher.family} model's final norm has none: use "
                "input_scale='none'"
            )
        options["input_scale"] = "none"
        built = built_with()
        notes.append("the final norm has no gain: no scale correction (input_scale='none')")
    return built


def _calibration(
    calibration: Windows | TeacherCapture | Callable[[int], Windows] | None,
    settings: dict[str, Any],
    fit_options: FitOptions | None,
) -> Windows | TeacherCapture | None:
    """The calibration windows the settings ask for (a function of tokens is called only then).

    Without windows a default "fit" falls back to its closed form (`settings` updated); an
    explicit t_init="fit" raises ValueError.
    """
    if callable(calibration):
        if settings.get("fit"):
            fit = fit_options or FitOptions()
            calibration = calibration(fit.tokens + fit.check_tokens)
        elif settings.get("search_input_scale"):
            calibration = calibration(SEARCH_TOKENS)
        else:
            calibration = None
    if settings.get("fit") and not calibration:
        if settings["fit"] == "requested":
            raise InvalidInputError(
                "t_init='fit' fits T to the teacher on calibration text: pass calibration="
                "[(inputs, targets), ...] windows (tying convert and tying train do), or "
                f"choose a closed form from {PIT_INITS[:-1]}"
            )
        settings["t_init"], settings["fit"] = settings["closed_form"], None
    return calibration


def _captures(
    model: nn.Module,
    calibration: Windows | TeacherCapture | None,
    measure: Windows | TeacherCapture | None,
    settings: dict[str, Any],
) -> tuple[TeacherCapture | None, TeacherCapture | None]:
    """(the teacher on the calibration windows if the settings use them, on `measure`).

    Taken before the conversion changes anything; a `TeacherCapture` is used as it is.
    """

    def captured_of(windows: Windows | TeacherCapture) -> TeacherCapture:
        return windows if isinstance(windows, TeacherCapture) else capture_teacher(model, windows)

    wants_data = settings.get("fit") or settings.get("search_input_scale")
    captured = captured_of(calibration) if calibration and wants_data else None
    measured = captured_of(measure) if measure else None
    return captured, measured


def _report(
    teacher: Teacher,
    built: TeacherConversion,
    tokenizer_vocab: int | None,
    padded_rows: int | None,
    notes: list[str],
) -> ConversionReport:
    """The report of what was built (the measured fields are filled in later)."""
    interface, used, settings = built.interface, built.used, built.settings
    V, d = teacher.E0.shape
    return ConversionReport(
        model_type=teacher.model_type,
        family=teacher.family,
        tie=tie_of(interface),
        t_init=settings.get("t_init"),
        source=built.source,
        teacher_tied=teacher.tied,
        vocab_rows=int(V),
        d_model=int(d),
        tokenizer_vocab=tokenizer_vocab,
        padded_rows=padded_rows,
        zero_rows=int((used == 0).all(dim=1).sum()) if used.numel() else 0,
        embed_scale=float(teacher.embed_scale),
        output_bias=teacher.bias is not None,
        logit_softcap=teacher.softcap,
        dtype=str(interface.embedding_matrix().dtype).removeprefix("torch."),
        notes=notes + built.notes,
        centre=settings.get("centre"),
        input_scale=settings.get("input_scale"),
    )


def _finish(
    model: nn.Module,
    report: ConversionReport,
    settings: dict[str, Any],
    captured: TeacherCapture | None,
    fit_options: FitOptions | None,
    progress: bool,
) -> None:
    """After installing the interface: what its settings ask (gain, scale search, fit)."""
    if "gain_factor" not in settings:
        return
    gain_factor = float(settings["gain_factor"])
    if gain_factor != 1.0:
        parts_of(model).scale_final_norm_(gain_factor)
    report.gain_factor = gain_factor
    r0 = settings.get("input_scale")
    if settings.get("search_input_scale") and r0 is not None and captured is not None:
        search = search_input_scale(model, captured.subset(SEARCH_TOKENS))
        report.input_scale = r0 * search.best
        report.gain_factor = gain_factor * search.best
        report.scale_search = {f"{r0 * f:.4g}": kl for f, kl in search.kl.items()}
    if settings.get("fit") and captured is not None:
        result = fit_pit(model, captured, fit_options or FitOptions(), progress=progress)
        report.fit = result.to_dict()


def convert(
    model: nn.Module,
    tie: str = "pit",
    *,
    source: str | None = None,
    tokenizer: Any = None,
    calibration: Windows | TeacherCapture | Callable[[int], Windows] | None = None,
    measure: Windows | TeacherCapture | None = None,
    fit_options: FitOptions | None = None,
    progress: bool = False,
    **interface_options: Any,
) -> ConversionReport:
    """Replace, in place, the embedding and head of a model by a token interface built from them.

    Args:
        model: a `transformers` causal LM of a supported architecture
            (`tying.hf.families.supported_model_types()`, with `tying.hf` imported), not yet
            converted, or an `InterfaceModel` such as our decoder (any tie).
        tie: a registered interface name ("untied", "tt", "pit").
        source: TT/PIT only: the teacher matrix the interface is built from,
            "input" (E0) or "output" (U0). Default: "input" for TT; for PIT
            "output" when t_init is "output" or "fit", else "input". Irrelevant for tied
            teachers.
        tokenizer: optional tokenizer; len(tokenizer) is checked against the
            embedding rows and padded rows are reported.
        calibration: (inputs, targets) windows (B, T) of calibration text, their
            `TeacherCapture` (taken on this model before conversion), or a function
            `tokens -> windows` called only when the conversion asks for data (PIT:
            input_scale="auto" searches on the first 1,024 tokens, t_init="fit" fits on
            `fit_options.tokens + check_tokens`). Without them PIT's default t_init falls
            back to CLOSED_FORM_T_INIT; an explicit t_init="fit" raises.
        measure: optional held-out windows (or their capture); the step-0
            KL(teacher ‖ converted) on them goes into the report (`report.step0`).
        fit_options: `FitOptions` for t_init="fit" (default: its defaults).
        progress: show progress bars (scale search, fit).
        interface_options: the interface's conversion options, the keywords of its teacher
            builder (`teacher_builder`; PIT: t_init (one of PIT_INITS, default
            `DEFAULT_T_INIT`), centre (default True), input_scale (r > 0, "auto" or
            "none"; default "auto"), trainable_z, diag_activation, diag_clamp,
            retraction_eps, rank_rtol, loss_chunk_size; TT: input_grad_scale,
            loss_chunk_size; untied: loss_chunk_size); one that does not apply raises
            ValueError.

    Returns:
        The ConversionReport (a transformers model also keeps it as `model.tying_report` and,
        as a dict, in `model.config.tying["report"]`).

    Raises:
        ValueError: unsupported architecture, model already converted, bad
            option, a tokenizer larger than the embedding, t_init="fit" without
            calibration windows, or (PIT) a rank-deficient teacher matrix.
    """
    cls = interface_class(tie)
    kind, inner = kind_of(model)
    teacher = kind.teacher(inner)
    options = {k: v for k, v in interface_options.items() if v is not None}
    build = teacher_builder(cls)
    check_options(tie, build, options, "conversion")
    tokenizer_vocab, padded_rows, notes = _vocabulary(tokenizer, int(teacher.E0.shape[0]))
    built = _build(teacher, build, source, options, notes)
    calibration = _calibration(calibration, built.settings, fit_options)
    captured, measured = _captures(model, calibration, measure, built.settings)
    report = _report(teacher, built, tokenizer_vocab, padded_rows, notes)
    teacher.install(built.interface)
    _finish(model, report, built.settings, captured, fit_options, progress)
    if measured is not None:
        report.step0 = step0_kl(model, measured)
    teacher.record(report)
    return report
