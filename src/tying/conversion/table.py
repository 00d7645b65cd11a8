"""How far does each conversion move a pretrained teacher before any training (step 0)?

For a teacher model and held-out text, the loss (nats/token) and the KL divergence
KL(teacher ‖ converted) (nats/token, averaged over positions) right after conversion, for TT
and for PIT with each option of `tying.conversion.convert`: the raw closed forms (`identity`,
`output`, `input`: T = H^p, nothing else), the scale correction (E at the teacher's scale, the
head kept by the final-norm gain), the centred memory (mean row as input bias), the searched
scale, and `fit`.

PIT forces W_out E = I_d, so it cannot keep both the teacher's embedding and its head
(docs/teacher.md): "output" keeps the head (W_out = E0^T) and replaces the embedding by
pinv(E0^T) = E0 (E0^T E0)^{-1}; "input" keeps the embedding and replaces the head;
"identity" replaces both by the orthonormal polar factor U of E0.

The teacher is a transformers causal LM (with `tying.hf` imported) or an `InterfaceModel` such
as our decoder; `tying.teacher.step0` cuts the windows from text and runs `tying convert`.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from tying.conversion.capture import capture_teacher
from tying.conversion.fit import FitOptions
from tying.conversion.pipeline import convert

Batch = tuple[Tensor, Tensor]


#: name -> keyword arguments of `tying.conversion.convert` (the step-0 table's rows, in order).
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


def conversion_table(
    teacher: nn.Module,
    measure: Sequence[Batch],
    calibration: Sequence[Batch] | None = None,
    variants: dict[str, dict[str, Any]] | None = None,
    fit_options: FitOptions | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Loss and KL to the teacher at step 0 for each conversion in `variants`.

    Args:
        teacher: an unconverted transformers causal LM, or an `InterfaceModel` such as our
            decoder; left unchanged (each variant converts a copy).
        measure: held-out (inputs, targets) windows (B, T), targets shifted by one.
        calibration: windows for the options that search or fit (a variant that needs them
            is skipped without).
        variants: name -> `tying.conversion.convert` keyword arguments (default `VARIANTS`).
        fit_options: `FitOptions` of the "fit" variants.
        progress: progress bars of the fits.

    Returns:
        {"teacher": {"loss", "ppl"}, "variants": {name: {"loss", "ppl", "kl", "options",
         "input_scale", "gain_factor", "scale_search", "fit", "elapsed_s"}}, "tokens": n,
         "unit": "nats/token"}
    """
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
        report = convert(model, tie, measure=measured, **kwargs).to_dict()
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
    fit_options: FitOptions | None = None,
    progress: bool = False,
    **options: Any,
) -> dict[str, Any]:
    """`convert` for a model that is not a transformers one, such as our decoder.

    Replaces, in place, `model.interface` (an `InterfaceModel`, e.g. a `tying.decoder.Decoder`
    trained with any tie) by interface `tie` built from its current matrices, then does what
    the conversion's settings ask: multiply the final-norm gain, search the input scale and fit
    on the calibration windows (or capture), and measure the step-0 KL on `measure`.

    Returns:
        {"t_init", "centre", "input_scale", "gain_factor", "scale_search", "fit", "notes",
         "step0"} (the ConversionReport fields the step-0 table reads).
    """
    report = convert(
        model,
        tie,
        calibration=calibration,
        measure=measure,
        fit_options=fit_options,
        progress=progress,
        **options,
    ).to_dict()
    return {key: report[key] for key in _TABLE_FIELDS}


#: The ConversionReport fields `convert_interface_model` returns.
_TABLE_FIELDS = (
    "t_init",
    "centre",
    "input_scale",
    "gain_factor",
    "scale_search",
    "fit",
    "notes",
    "step0",
)
