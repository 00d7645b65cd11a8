"""`tying convert`'s options: the interface's section as in a run's config (`pit:` holding t_init
and fit), one list of t_init choices, the flat keys of earlier versions read with a warning."""

from __future__ import annotations

import typing

import pytest
import torch

from tying.config import ConfigError, from_dict, load_config
from tying.conversion import closed_form
from tying.interface.options import PIT_INITS, FitOptions, PitOptions
from tying.teacher.conversion import TRAINING_ONLY_KEYS, ConvertOptions
from tying.train.config import TrainConfig


def test_one_list_of_t_init_choices() -> None:
    """PitOptions (train and convert alike) and the closed forms read the same tuple."""
    assert PIT_INITS == ("identity", "output", "input", "fit")
    assert closed_form.PIT_INITS is PIT_INITS
    assert closed_form.T_INITS == ("identity", "output", "input")
    hint = typing.get_type_hints(PitOptions)["t_init"]
    assert set(typing.get_args(typing.get_args(hint)[0])) == set(PIT_INITS)
    for cls in (TrainConfig, ConvertOptions):
        assert typing.get_type_hints(cls)["pit"] is PitOptions


def test_conversion_keywords_come_from_the_interface_section() -> None:
    options = from_dict(
        ConvertOptions,
        {"spec": "x", "out": "o", "tie": "pit", "pit": {"t_init": "input", "centre": False}},
    )
    assert options.conversion_keywords() == {
        "t_init": "input",
        "centre": False,
        "input_scale": "auto",
        "trainable_z": False,
        "diag_activation": "exp",
    }
    tt = from_dict(ConvertOptions, {"spec": "x", "out": "o", "tie": "tt"})
    assert tt.conversion_keywords() == {"input_grad_scale": 1.0}
    untied = from_dict(ConvertOptions, {"spec": "x", "out": "o", "tie": "untied"})
    assert untied.conversion_keywords() == {}
    with pytest.raises(ConfigError, match="pit.t_init applies to tie='pit' only"):
        from_dict(ConvertOptions, {"spec": "x", "out": "o", "tie": "tt", "pit": {"t_init": "fit"}})


def test_flat_keys_of_earlier_versions_are_read_with_a_warning() -> None:
    old = {"spec": "x", "out": "o", "tie": "pit", "t_init": "output", "centre": False}
    old |= {"input_scale": "1", "trainable_z": True, "fit": {"tokens": 512}}
    with pytest.warns(DeprecationWarning, match="now pit.fit"):
        options = from_dict(ConvertOptions, old)
    assert options.pit.t_init == "output" and options.pit.centre is False
    assert options.pit.input_scale == "1" and options.pit.trainable_z is True
    assert options.pit.fit == FitOptions(tokens=512)
    with pytest.warns(DeprecationWarning, match="'fit' is now pit.fit"):
        cfg = load_config(TrainConfig, None, ["tie=pit", "fit.tokens=256"])
    assert cfg.pit.fit.tokens == 256
    with pytest.raises(ConfigError, match="both given"):
        load_config(TrainConfig, None, ["tie=pit", "fit.tokens=256", "pit.fit.tokens=128"])


def test_convert_has_no_flag_for_training_only_keys() -> None:
    from tying.cli import build_parser

    text = build_parser("convert").format_help()
    assert "--pit.t-init" in text and "--pit.fit.tokens" in text and "--tt.input-grad-scale" in text
    for key in TRAINING_ONLY_KEYS:
        assert f"--{key.replace('_', '-')} " not in text, key


def test_a_resolved_device_is_not_resolved_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """`tying evaluate` resolves its device once and hands TyingLM the torch.device."""
    from tying import devices
    from tying.evaluation import harness

    def resolve_again(device):
        raise AssertionError(f"resolve_device({device!r}) called a second time")

    monkeypatch.setattr(devices, "resolve_device", resolve_again)
    assert harness._device(torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(AssertionError, match="second time"):
        harness._device("cpu")  # a name (lm-eval's command line) is resolved there
