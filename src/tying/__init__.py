"""tying: the token interface of language models.

The input embedding E (V×d) and the output projection W_out (d×V), built three
ways (untied, transpose-tied, pseudo-inverse-tied), trained and measured.

The names below are imported on first use, so that `import tying` (and `tying --help`)
does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tying import _compat

__version__ = "0.2.0"

_compat.install()

#: Public name -> module that defines it, or "module:attribute" (imported lazily by
#: `__getattr__`). `tying.load(spec, ...)` is the one entry point for any model by SPEC.
_LAZY = {
    "load": "tying.loader:load_any",
    "PseudoInverseTying": "tying.interface",
    "TokenInterface": "tying.interface",
    "TransposeTying": "tying.interface",
    "Untied": "tying.interface",
    "build_interface": "tying.interface",
    "linear_cross_entropy": "tying.interface",
}

if TYPE_CHECKING:
    from tying.interface import (
        PseudoInverseTying,
        TokenInterface,
        TransposeTying,
        Untied,
        build_interface,
        linear_cross_entropy,
    )
    from tying.loader import load_any as load


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, _, attribute = _LAZY[name].partition(":")
        return getattr(importlib.import_module(module), attribute or name)
    raise AttributeError(f"module 'tying' has no attribute {name!r}")


__all__ = [
    "PseudoInverseTying",
    "TokenInterface",
    "TransposeTying",
    "Untied",
    "__version__",
    "build_interface",
    "linear_cross_entropy",
    "load",
]
