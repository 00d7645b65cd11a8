"""Python >= 3.12 semantics of runtime Protocols must not break the model check.

Since Python 3.12, `isinstance(x, P)` for a `runtime_checkable` Protocol reads attributes with
`inspect.getattr_static`, which does not see an `nn.Module`'s submodules. `typing_extensions`
backports that behaviour, so the child process below replaces `typing.Protocol` and
`typing.runtime_checkable` by `typing_extensions`' before importing tying: on Python 3.11 it then
sees what Python 3.12 and 3.13 see. Before the fix (`isinstance(model, InterfaceModel)` against
a runtime Protocol) `wrap_model` refused our own Decoder there ("Decoder is neither a tying model
... nor a transformers causal LM"), so `tying probe` and `tying lens` failed on 3.12.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from torch import nn

from tying.decoder import Decoder, preset_config
from tying.interface import is_interface_model

_CHILD = textwrap.dedent(
    """
    import typing, typing_extensions
    typing.Protocol = typing_extensions.Protocol
    typing.runtime_checkable = typing_extensions.runtime_checkable

    import inspect
    import torch
    from tying.decoder import Decoder, preset_config
    from tying.loader import wrap_model

    model = Decoder(preset_config("tiny", vocab_size=300, tie="{tie}", n_layers=1))
    # the 3.12 semantics are really in force: static lookup misses the submodules
    assert inspect.getattr_static(model, "blocks", None) is None
    loaded = wrap_model(model)
    assert loaded.model is model
    print("ok", type(loaded.model).__name__)
    """
)

#: a decorator or call of runtime_checkable (mentions in prose do not count)
_RUNTIME_PROTOCOL = re.compile(
    r"@(typing\.|typing_extensions\.)?runtime_checkable|runtime_checkable\("
)


def _run_child(tie: str) -> subprocess.CompletedProcess[str]:
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [sys.executable, "-c", _CHILD.format(tie=tie)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_wrap_model_accepts_our_decoder_under_python312_protocol_semantics() -> None:
    for tie in ("tt", "pit"):
        done = _run_child(tie)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "ok Decoder"


def test_structural_check_sees_submodules_and_rejects_look_alikes() -> None:
    model = Decoder(preset_config("tiny", vocab_size=64, tie="tt", n_layers=1))
    assert is_interface_model(model)

    class NoInterface(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.final_norm = nn.Identity()
            self.blocks = nn.ModuleList()

        def residual_states(self, ids: torch.Tensor) -> list[torch.Tensor]:
            return []

        def final_hidden(self, ids: torch.Tensor) -> torch.Tensor:
            return ids

    assert not is_interface_model(NoInterface())
    assert not is_interface_model(object())
    # a model whose interface is replaced by a plain module is no longer one
    model.interface = nn.Linear(2, 2)  # type: ignore[assignment]
    assert not is_interface_model(model)


def test_no_runtime_checkable_protocols_in_the_package() -> None:
    src = Path(__file__).resolve().parents[1] / "src" / "tying"
    offenders = [
        str(path.relative_to(src))
        for path in src.rglob("*.py")
        if _RUNTIME_PROTOCOL.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], f"runtime Protocols break on Python >= 3.12 for nn.Modules: {offenders}"
