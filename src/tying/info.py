"""`tying info`: versions and what this installation can do."""

from __future__ import annotations

import importlib.metadata
import platform
from typing import Any

#: The Python and torch versions the project's tests ran on (README, "Tested versions"): CI on
#: CPython 3.11 with torch 2.13 (CPU); `make test-compat` with the lowest admitted torch and 2.11;
#: the GPU machine with CPython 3.12 and torch 2.11 + CUDA 13.
TESTED = {"python": ["3.11", "3.12"], "torch": ["2.6.0", "2.11.0", "2.13.0"]}


def environment_info() -> dict[str, Any]:
    """Versions of tying, Python, torch, transformers (None when absent), the versions the
    project tested, and the device, precision and compilation a verb picks on "auto"; `cpu_bf16` says on what the
    CPU's bf16 verdict rests (the flags found, the ones missing, or TYING_CPU_BF16)."""
    import torch

    import tying
    from tying.devices import cpu_bf16_support, resolve_compile, resolve_device, resolve_precision

    device = resolve_device("auto")
    info: dict[str, Any] = {
        "tying": tying.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "tested_python": ", ".join(TESTED["python"]),
        "tested_torch": ", ".join(TESTED["torch"]),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "compile_auto": resolve_compile("auto", device),
        "cuda_available": torch.cuda.is_available(),
        "cpu_threads": torch.get_num_threads(),
        "cpu_fast_bf16": cpu_bf16_support()[0],
        "cpu_bf16": cpu_bf16_support()[1],
        "auto_precision": resolve_precision("auto", device),
    }
    # the installed distributions' versions, read without importing them (transformers, peft
    # and lm-eval take seconds to import)
    for package, distribution in (
        ("transformers", "transformers"),
        ("peft", "peft"),
        ("lm_eval", "lm_eval"),
    ):
        try:
            info[package] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            info[package] = None
    return info
