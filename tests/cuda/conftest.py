"""Fixtures of the GPU tests: every test here is marked `cuda` and skipped without a GPU."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def cuda() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch.device("cuda")
