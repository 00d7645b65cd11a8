"""One device resolver and one precision setting for every verb (`tying.devices`)."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import torch

from tying import devices
from tying.devices import PRECISIONS, Precision, resolve_device, resolve_precision


def test_auto_is_cuda_when_present_else_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device(None) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_cuda_without_cuda_is_refused_not_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "cuda:0", torch.device("cuda:1")):
        with pytest.raises(ValueError, match="CUDA is not available here; use cpu or auto"):
            resolve_device(device)
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        resolve_device("gpu")


def test_the_harness_name_is_the_devices_function_with_a_warning() -> None:
    import tying.evaluation.harness as harness

    with pytest.warns(DeprecationWarning, match=r"harness\.resolve_device moved to tying\.devices"):
        old = harness.resolve_device
    assert old is resolve_device


def test_the_harness_command_line_defaults_to_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    import lm_eval.__main__

    from tying.evaluation import harness_cli

    seen: list[list[str]] = []
    monkeypatch.setattr(
        lm_eval.__main__, "cli_evaluate", lambda: seen.append(list(harness_cli.sys.argv))
    )
    monkeypatch.setattr(harness_cli.sys, "argv", ["lm_eval"])
    harness_cli.main(["--model", "tying", "--tasks", "x"])
    assert seen[-1][-2:] == ["--device", "auto"]
    harness_cli.main(["--model", "tying", "--device", "cpu"])
    assert "auto" not in seen[-1]
    harness_cli.main(["ls", "tasks"])
    assert "--device" not in seen[-1]


def test_precision_choices_and_resolution() -> None:
    assert PRECISIONS == ("auto", "bf16", "fp32") == typing.get_args(Precision)
    assert resolve_precision("fp32", "cpu") == "fp32"
    assert resolve_precision("bf16", "cpu") == "bf16"
    assert resolve_precision("auto", "cpu") in ("bf16", "fp32")
    with pytest.raises(ValueError, match="precision must be one of auto, bf16, fp32"):
        resolve_precision("fp16")


def _verb_options() -> list:
    from tying.evaluation.evaluate import EvaluateOptions
    from tying.evaluation.side_effects import SideEffectsOptions
    from tying.evaluation.text_loss import EvalOptions
    from tying.experiment.config import LensSettings
    from tying.experiment.demo import DemoOptions
    from tying.lens.pipeline import LensOptions, TraceOptions
    from tying.train.config import TrainConfig
    from tying.update import FinetuneOptions

    return [
        TrainConfig,
        EvalOptions,
        LensOptions,
        TraceOptions,
        EvaluateOptions,
        SideEffectsOptions,
        LensSettings,
        DemoOptions,
        FinetuneOptions,
    ]


@pytest.mark.parametrize("options", _verb_options(), ids=lambda c: c.__name__)
def test_every_verb_declares_precision_auto(options: type) -> None:
    """docs/architecture.md: `precision: auto` for every verb, one Literal type."""
    field = {f.name: f for f in dataclasses.fields(options)}["precision"]
    assert field.default == "auto"
    assert typing.get_type_hints(options)["precision"] == devices.Precision
