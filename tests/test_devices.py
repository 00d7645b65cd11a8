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


def test_cpu_bf16_detection_reads_the_flags_and_the_override_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fast bf16 rests on a native bf16 instruction in the CPU flags; TYING_CPU_BF16 overrides."""
    monkeypatch.delenv(devices.CPU_BF16_ENV, raising=False)
    cases = {
        frozenset({"avx2", "avx512f", "avx512_bf16"}): (True, "avx512_bf16"),
        frozenset({"avx2", "amx_bf16", "avx512_bf16"}): (True, "avx512_bf16, amx_bf16"),
        frozenset({"avx2", "fma"}): (False, "no avx512_bf16/amx_bf16 (avx2)"),
        frozenset({"avx2", "avx512f", "avx512bw"}): (False, "no avx512_bf16/amx_bf16 (avx512f)"),
    }
    for flags, expected in cases.items():
        devices._detected_cpu_bf16.cache_clear()
        monkeypatch.setattr(devices, "cpu_flags", lambda flags=flags: set(flags))
        assert devices.cpu_bf16_support() == expected
        assert devices.cpu_has_fast_bf16() is expected[0]
        assert resolve_precision("auto", "cpu") == ("bf16" if expected[0] else "fp32")
    devices._detected_cpu_bf16.cache_clear()
    for value, fast in (("0", False), ("1", True)):
        monkeypatch.setenv(devices.CPU_BF16_ENV, value)
        assert devices.cpu_bf16_support() == (fast, f"TYING_CPU_BF16={value}")
    monkeypatch.delenv(devices.CPU_BF16_ENV)
    devices._detected_cpu_bf16.cache_clear()


def test_this_machines_cpu_flags_are_read() -> None:
    """On Linux the verdict names flags of /proc/cpuinfo, not oneDNN's answer."""
    flags = devices.cpu_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo here")
    fast, why = devices._detected_cpu_bf16()
    assert fast == any(f in flags for f in devices.FAST_BF16_FLAGS)
    assert why.startswith("no avx512_bf16") != fast


def test_without_fast_bf16_every_path_resolves_to_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an AVX2-like CPU (TYING_CPU_BF16=0) no path picks bf16 unasked: precision auto of every
    verb (train and teacher continuation, demo, lens, probe's lens, evaluate, side effects,
    finetune), the PIT fit of a conversion and the lens head; bf16 stays available when asked."""
    from tying.conversion import FitOptions
    from tying.train.config import TrainConfig

    monkeypatch.setenv(devices.CPU_BF16_ENV, "0")
    assert resolve_precision("auto", "cpu") == "fp32"
    assert devices.autocast_for("cpu", "auto") is devices.nullcontext
    for options in _verb_options():
        field = {f.name: f for f in dataclasses.fields(options)}["precision"]
        assert resolve_precision(field.default, "cpu") == "fp32", options.__name__
    assert FitOptions().autocast == "auto"
    assert not FitOptions().uses_autocast("cpu")
    assert not TrainConfig(tie="pit").pit.fit.uses_autocast("cpu")
    assert FitOptions(autocast=True).uses_autocast("cpu")
    assert resolve_precision("bf16", "cpu") == "bf16"
    monkeypatch.setenv(devices.CPU_BF16_ENV, "1")
    assert resolve_precision("auto", "cpu") == "bf16"
    assert FitOptions().uses_autocast("cpu")
    with pytest.raises(ValueError, match="fit autocast must be true, false or auto"):
        FitOptions(autocast="yes")  # type: ignore[arg-type]


def test_info_says_on_what_the_bf16_verdict_rests(monkeypatch: pytest.MonkeyPatch) -> None:
    from tying.info import environment_info

    monkeypatch.setenv(devices.CPU_BF16_ENV, "0")
    info = environment_info()
    assert info["cpu_fast_bf16"] is False
    assert info["cpu_bf16"] == "TYING_CPU_BF16=0"
    if info["device"] == "cpu":
        assert info["auto_precision"] == "fp32"
