"""`tying info`: versions and what this installation can do."""

from __future__ import annotations

import platform
from typing import Any


def environment_info() -> dict[str, Any]:
    """Versions of tying, Python, torch, transformers (None when absent) and the devices."""
    import torch

    import tying
    from tying.devices import cpu_has_fast_bf16, resolve_precision

    info: dict[str, Any] = {
        "tying": tying.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "cpu_threads": torch.get_num_threads(),
        "cpu_fast_bf16": cpu_has_fast_bf16(),
        "auto_precision": resolve_precision("auto", "cuda" if torch.cuda.is_available() else "cpu"),
    }
    for package in ("transformers", "peft", "lm_eval"):
        try:
            module = __import__(package)
            info[package] = getattr(module, "__version__", "installed")
        except ImportError:
            info[package] = None
    return info
