"""`import tying` stays light (no torch) and its lazy names are the defining modules' objects;
`tying.load` is the one entry point for any model by SPEC (`tying.loader.load_any`)."""

from __future__ import annotations

import subprocess
import sys


def test_lazy_names_resolve_without_importing_torch_first() -> None:
    code = (
        "import sys, tying\n"
        "assert 'torch' not in sys.modules\n"
        "from tying.loader import load_any\n"
        "from tying.interface import PseudoInverseTying\n"
        "assert tying.load is load_any\n"
        "assert tying.PseudoInverseTying is PseudoInverseTying\n"
        "assert set(tying.__all__) >= {'load', 'PseudoInverseTying', 'build_interface'}\n"
        "try:\n"
        "    tying.no_such_name\n"
        "except AttributeError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('unknown names must raise AttributeError')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
