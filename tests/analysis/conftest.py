"""Fixtures of the analysis tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="session")
def naive() -> ModuleType:
    """The naive float64 reference implementations (tests/analysis/analysis_naive.py).

    Loaded by path: the suite runs with --import-mode=importlib, which puts no test folder on
    sys.path.
    """
    path = Path(__file__).with_name("analysis_naive.py")
    spec = importlib.util.spec_from_file_location("analysis_naive", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
