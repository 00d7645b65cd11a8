"""Teacher conversion: a pretrained model's embedding and head -> one token interface.

The pipeline, one module a step:

- `closed_form`: the closed forms of a PIT from a teacher (polar factors, scale, centring),
  the least-squares final-norm gain, and `teacher_builder` (the builder of each interface);
- `model`: what a conversion reads and changes in a model of any kind (`ModelParts`,
  `Teacher`; transformers models through the kind `tying.hf` registers);
- `capture`: the teacher on calibration windows (`capture_teacher`) and the step-0
  KL(teacher ‖ converted) (`step0_kl`);
- `scale`: the searched input scale of PIT (`search_input_scale`);
- `fit`: T and the final-norm gain fitted to the teacher (`fit_pit`, `FitOptions`);
- `pipeline`: `convert`, which builds, installs, calibrates and measures;
- `report`: `ConversionReport`;
- `table`: the step-0 table over conversion variants (`conversion_table`).

    report = tying.conversion.convert(model, "pit", calibration=windows, measure=held_out)

The package sits between `tying.interface` and `tying.hf` (docs/architecture.md): it imports
no transformers code; `tying.hf.convert` is `convert`, with the transformers kind registered.
"""

from tying.conversion.capture import TeacherCapture, capture_teacher, step0_kl
from tying.conversion.closed_form import (
    CLOSED_FORM_T_INIT,
    DEFAULT_T_INIT,
    INPUT_SCALE_MODES,
    PIT_INITS,
    T_INIT_POWER,
    T_INITS,
    TeacherFactors,
    least_squares_gain,
    parse_input_scale,
    pit_from_teacher,
    pit_from_teacher_matrices,
    teacher_builder,
    teacher_factors,
)
from tying.conversion.fit import FIT_PARAMETERS, FitOptions, FitReport, fit_pit
from tying.conversion.model import (
    ModelKind,
    ModelParts,
    Teacher,
    parts_of,
    register_model_kind,
    unwrap_model,
)
from tying.conversion.pipeline import convert
from tying.conversion.report import ConversionReport
from tying.conversion.scale import SEARCH_TOKENS, ScaleSearch, scale_final_norm_, search_input_scale
from tying.conversion.table import RAW, VARIANTS, conversion_table, convert_interface_model

__all__ = [
    "CLOSED_FORM_T_INIT",
    "DEFAULT_T_INIT",
    "FIT_PARAMETERS",
    "INPUT_SCALE_MODES",
    "PIT_INITS",
    "RAW",
    "SEARCH_TOKENS",
    "T_INITS",
    "T_INIT_POWER",
    "VARIANTS",
    "ConversionReport",
    "FitOptions",
    "FitReport",
    "ModelKind",
    "ModelParts",
    "ScaleSearch",
    "Teacher",
    "TeacherCapture",
    "TeacherFactors",
    "capture_teacher",
    "conversion_table",
    "convert",
    "convert_interface_model",
    "fit_pit",
    "least_squares_gain",
    "parse_input_scale",
    "parts_of",
    "pit_from_teacher",
    "pit_from_teacher_matrices",
    "register_model_kind",
    "scale_final_norm_",
    "search_input_scale",
    "step0_kl",
    "teacher_builder",
    "teacher_factors",
    "unwrap_model",
]
