"""`compile: auto` and its resolution (tying.devices.resolve_compile)."""

from __future__ import annotations

import pytest
import torch

from tying.devices import resolve_compile


def test_auto_is_off_on_the_cpu_and_explicit_settings_are_kept(monkeypatch) -> None:
    monkeypatch.delenv("TYING_COMPILE", raising=False)
    assert resolve_compile("auto", "cpu") is False
    assert resolve_compile(True, "cpu") is True
    assert resolve_compile(False, "cpu") is False
    with pytest.raises(ValueError, match="true, false or auto"):
        resolve_compile("yes", "cpu")


def test_auto_on_cuda_follows_triton_hooks_and_the_switch(monkeypatch) -> None:
    import tying.devices as devices

    monkeypatch.delenv("TYING_COMPILE", raising=False)
    monkeypatch.setattr(devices, "triton_compiles_for", lambda device: True)
    cuda = torch.device("cuda")  # only its type is read: no GPU needed
    assert resolve_compile("auto", cuda) is True
    assert resolve_compile("auto", cuda, hooks=True) is False
    monkeypatch.setenv("TYING_COMPILE", "0")
    assert resolve_compile("auto", cuda) is False
    monkeypatch.setattr(devices, "triton_compiles_for", lambda device: False)
    monkeypatch.delenv("TYING_COMPILE")
    assert resolve_compile("auto", cuda) is False


@pytest.mark.parametrize(
    ("installed", "capability", "expected"),
    [(True, (7, 0), True), (True, (9, 0), True), (True, (6, 1), False), (False, (9, 0), False)],
)
def test_triton_compiles_for_needs_the_package_and_capability_7(
    monkeypatch, installed: bool, capability: tuple[int, int], expected: bool
) -> None:
    import importlib.util

    from tying.devices import triton_compiles_for

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (object() if installed else None) if name == "triton" else real(name, *a),
    )
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert triton_compiles_for(torch.device("cuda")) is expected


@pytest.mark.cuda
def test_triton_compiles_for_agrees_with_torchs_has_triton(cuda) -> None:
    from torch.utils._triton import has_triton

    from tying.devices import triton_compiles_for

    assert triton_compiles_for(cuda) is has_triton()
