"""Names that moved in tying 0.2 stay importable from their old place, with a warning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

MOVED = [
    ("tying.models", "load_any", "tying.loader"),
    ("tying.model", "Decoder", "tying.decoder"),
    ("tying.model", "TyingForCausalLM", "tying.hf.decoder_lm"),
    ("tying.model.decoder", "Decoder", "tying.decoder.decoder"),
    ("tying.model.hf", "TyingConfig", "tying.hf.decoder_lm"),
    ("tying.model.presets", "preset_config", "tying.decoder.presets"),
    ("tying.experiments.teacher_init", "conversion_table", "tying.teacher.step0"),
    ("tying.interface.factory", "build_interface", "tying.interface.registry"),
    ("tying.hf.calibrate", "fit_pit", "tying.conversion"),
    ("tying.hf.calibrate", "FitOptions", "tying.conversion"),
    ("tying.hf.adapters", "get_adapter", "tying.hf.families"),
    ("tying.train.loop", "train", "tying.train.run"),
    ("tying.train.loop", "TrainResult", "tying.train.run"),
    ("tying.train.loop", "MODEL_KEYS", "tying.train.run"),
    ("tying.train.loop", "check_resume_compatible", "tying.train.run"),
]

#: Names that moved out of a module that stays (served by its `__getattr__`).
MOVED_NAMES = [
    ("tying.interface.pit", "teacher_factors", "tying.conversion.closed_form"),
    ("tying.interface.pit", "TeacherFactors", "tying.conversion.closed_form"),
    ("tying.interface.pit", "T_INITS", "tying.conversion.closed_form"),
    ("tying.interface.pit", "PIT_INITS", "tying.conversion.closed_form"),
    ("tying.interface.pit", "parse_input_scale", "tying.conversion.closed_form"),
    ("tying.hf.convert", "ConversionReport", "tying.conversion.report"),
    ("tying.hf.convert", "SEARCH_TOKENS", "tying.conversion.scale"),
    ("tying.hf.convert", "DEFAULT_T_INIT", "tying.conversion.closed_form"),
    ("tying.teacher.step0", "conversion_table", "tying.conversion.table"),
    ("tying.teacher.step0", "convert_interface_model", "tying.conversion.table"),
    ("tying.teacher.step0", "VARIANTS", "tying.conversion.table"),
]


def test_old_module_paths_warn_and_give_the_same_object() -> None:
    # In a fresh interpreter, so that the first import of each old path (the one that warns)
    # happens here; one interpreter for all of them (torch is imported once).
    code = (
        "import warnings, importlib, sys\n"
        f"MOVED = {MOVED!r}\n"
        "for old, name, new in MOVED:\n"
        "    target = getattr(importlib.import_module(new), name)\n"
        "    seen = old in sys.modules\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always', DeprecationWarning)\n"
        "        got = getattr(importlib.import_module(old), name)\n"
        "    messages = [str(w.message) for w in caught if w.category is DeprecationWarning]\n"
        "    assert seen or any('moved to tying.' in m for m in messages), (old, messages)\n"
        "    assert got is target, (old, name)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


@pytest.mark.parametrize("module", ["tying.hf", "tying.hf.export"])
def test_load_for_export_moved_to_the_loader(module: str) -> None:
    from tying.loader import load_for_export

    with pytest.warns(DeprecationWarning, match="tying.loader.load_for_export"):
        old = importlib.import_module(module).load_for_export
    assert old is load_for_export


@pytest.mark.parametrize(("module", "name", "new"), MOVED_NAMES)
def test_moved_names_warn_and_give_the_same_object(module: str, name: str, new: str) -> None:
    target = getattr(importlib.import_module(new), name)
    with pytest.warns(DeprecationWarning, match=f"{module}.{name} moved to {new}.{name}"):
        old = getattr(importlib.import_module(module), name)
    assert old is target


def test_pit_teacher_constructors_moved_to_the_conversion_package() -> None:
    import torch

    from tying.conversion import pit_from_teacher, pit_from_teacher_matrices
    from tying.interface import PseudoInverseTying

    E0 = torch.randn(40, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with pytest.warns(DeprecationWarning, match="closed_form.pit_from_teacher"):
        old = PseudoInverseTying.from_teacher(E0, "output", dtype=torch.float64, centre=True)
    new = pit_from_teacher(E0, "output", dtype=torch.float64, centre=True)
    torch.testing.assert_close(old.state_dict(), new.state_dict(), rtol=0, atol=0)
    with pytest.warns(DeprecationWarning, match="closed_form.pit_from_teacher_matrices"):
        built = PseudoInverseTying.from_teacher_matrices(E0, E0, bias=None, teacher_tied=True)
    again = pit_from_teacher_matrices(E0, E0, bias=None, teacher_tied=True)
    assert built.settings == again.settings
    torch.testing.assert_close(built.interface.state_dict(), again.interface.state_dict())


def test_renamed_config_key_warns() -> None:
    from tying.config import from_dict
    from tying.train.config import TrainConfig

    with pytest.warns(DeprecationWarning, match="'out_dir' is now called 'out'"):
        cfg = from_dict(TrainConfig, {"out_dir": "runs/x"})
    assert cfg.out == "runs/x"
