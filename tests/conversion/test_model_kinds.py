"""The conversion package reads models through their kind and imports no transformers code."""

from __future__ import annotations

import subprocess
import sys

import pytest
from torch import nn


def test_the_conversion_package_imports_neither_transformers_nor_hf() -> None:
    code = (
        "import sys\n"
        "import tying.conversion\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'"
        " or m.startswith('tying.hf'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_model_of_no_kind_is_refused_with_what_is_read() -> None:
    from tying.conversion import convert, parts_of

    with pytest.raises(ValueError, match="neither an InterfaceModel"):
        parts_of(nn.Linear(3, 3))
    with pytest.raises(ValueError, match="neither an InterfaceModel"):
        convert(nn.Linear(3, 3), "tt")


def test_hf_convert_is_the_conversion_pipeline() -> None:
    import tying.conversion
    import tying.hf
    from tying.hf.convert import TransformersKind

    assert tying.hf.convert is tying.conversion.convert
    from tying.conversion.model import _KINDS

    assert any(isinstance(kind, TransformersKind) for kind in _KINDS)
