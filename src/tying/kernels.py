"""Compiled-or-eager elementwise kernels, shared by the chunked losses and the lens.

The chunked passes over logits (`tying.interface.loss`, `tying.interface.kl`,
`tying.lens.head`) form an (n, V) block of logits with one matrix product and then run a
few elementwise steps on it (bias, max, exp, sums, a gradient). Written with eager PyTorch
ops each step is a full pass over the block; compiled with `torch.compile` (Inductor: a
vectorised C++ loop on CPU, Triton on CUDA) the steps fuse into one or two reads. Each
such step is written once, as a plain function of the block, and `CompiledKernels` runs it
compiled where that pays and eagerly otherwise:

- compiled when the block holds at least `COMPILE_MIN_ELEMENTS` logits, a compiler for
  its device is present (`compiler_available`) and `TYING_COMPILE` is not "0";
- eager otherwise, and for good after the first compiler failure (one warning).

Compilation costs about 20 s per kernel and dtype once per process on a 2-core CPU (cached
on disk after that), so small blocks (tests, tiny models) stay eager.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

#: Blocks of at least this many logits (rows × V) run compiled: smaller ones do not repay the
#: compilation (about 20 s once per process on a 2-core CPU, cached on disk after that).
COMPILE_MIN_ELEMENTS = 1 << 24
#: Environment variable: "0" keeps every kernel eager.
COMPILE_ENV = "TYING_COMPILE"

log = logging.getLogger(__name__)


class CompiledKernels:
    """Runs plain functions of a block of logits compiled or eagerly (see the module docstring).

    Args:
        label: what the kernels serve, for the warning on a compiler failure.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self._compiled: dict[Callable[..., Any], Callable[..., Any]] = {}
        self._failed = False

    def enabled(self, elements: int, device: torch.device) -> bool:
        """Whether a block of `elements` logits on `device` runs compiled."""
        return (
            elements >= COMPILE_MIN_ELEMENTS
            and not self._failed
            and os.environ.get(COMPILE_ENV, "1") != "0"
            and compiler_available(device)
        )

    def call(self, fn: Callable[..., Any], z: Tensor, *args: Any) -> Any:
        """`fn(z, *args)` for an (n, V) block `z`: compiled when `enabled`, else eager."""
        if not self.enabled(z.numel(), z.device) or z.shape[0] < 2:
            return fn(z, *args)
        try:
            compiled = self._compiled.get(fn)
            if compiled is None:
                # symbolic sizes: one kernel for every number of rows (and vocabulary)
                compiled = self._compiled[fn] = torch.compile(fn, dynamic=True)
            return compiled(z, *args)
        except Exception as error:  # any compiler failure falls back to eager
            self._failed = True
            log.warning("%s kernels run eagerly: torch.compile failed (%s)", self.label, error)
            return fn(z, *args)


def compiler_available(device: torch.device) -> bool:
    """Whether `torch.compile` can build kernels for `device`: a C++ compiler for the CPU
    (the CXX variable, g++ or clang++), Triton for CUDA. Looked up once per device type."""
    return _compiler_available(device.type, os.environ.get("CXX", ""))


@functools.cache
def _compiler_available(device_type: str, cxx: str) -> bool:
    if device_type == "cpu":
        return any(shutil.which(c) for c in (cxx, "g++", "clang++") if c)
    if device_type == "cuda":
        from tying.devices import triton_compiles_for

        return triton_compiles_for(torch.device("cuda"))
    return False
