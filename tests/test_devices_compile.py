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
    import torch.utils._triton as triton_utils

    monkeypatch.delenv("TYING_COMPILE", raising=False)
    monkeypatch.setattr(triton_utils, "has_triton", lambda: True)
    cuda = torch.device("cuda")  # only its type is read: no GPU needed
    assert resolve_compile("auto", cuda) is True
    assert resolve_compile("auto", cuda, hooks=True) is False
    monkeypatch.setenv("TYING_COMPILE", "0")
    assert resolve_compile("auto", cuda) is False
    monkeypatch.setattr(triton_utils, "has_triton", lambda: False)
    monkeypatch.delenv("TYING_COMPILE")
    assert resolve_compile("auto", cuda) is False
