"""Device and precision: one convention for every verb, resolved here and nowhere else.

- device "auto" (or None): CUDA when present, else the CPU; a device named explicitly is
  used as named, and CUDA asked for where there is none is bad input (a ValueError saying to
  use cpu or auto), never a silent fall-back to the CPU: a run planned for a GPU must not
  start on the CPU unnoticed;
- compile "auto": `torch.compile` on CUDA with Triton (not on the CPU, not with per-step
  tensor hooks, not with TYING_COMPILE=0);
- precision "auto": bf16 autocast where the hardware multiplies bf16 natively (a CUDA GPU with
  bf16, or a CPU with AVX512-BF16/AMX as oneDNN reports it), else fp32. Factorizations,
  log-sum-exp, KL and losses always run in float32/float64 whatever the autocast dtype.
  Every verb's options declare `precision: Precision = "auto"`.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Literal

import torch

from tying.errors import InvalidInputError

#: The precision setting of every verb (options field `precision: Precision = "auto"`).
Precision = Literal["auto", "bf16", "fp32"]
PRECISIONS: tuple[str, ...] = typing.get_args(Precision)


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """`torch.device` of a device name; "auto" (or None) = cuda if available, else cpu.

    The one device resolver of the project (see the module docstring): an explicit device is
    used as named, never replaced by another.

    Raises:
        ValueError: an unknown device name, or CUDA asked for where there is none.
    """
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as e:
        raise InvalidInputError(
            f"unknown device {device!r} ({e}); use auto, cpu or cuda[:N]"
        ) from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise InvalidInputError(
            f"device {str(device)!r} asked for, but CUDA is not available here; use cpu or auto"
        )
    return resolved


def cpu_has_fast_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (oneDNN's bf16 support: AVX512-BF16 or AMX)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def resolve_precision(precision: str, device: str | torch.device = "cpu") -> str:
    """ "bf16" or "fp32" for a precision setting on `device` ("auto": see the module docstring);
    the one precision resolver of every verb.

    Raises:
        ValueError: a precision other than auto, bf16, fp32.
    """
    if precision not in PRECISIONS:
        raise InvalidInputError(
            f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}"
        )
    if precision != "auto":
        return precision
    device = torch.device(device)
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if device.type == "cpu" and cpu_has_fast_bf16() else "fp32"


def autocast_for(
    device: str | torch.device, precision: str
) -> Callable[[], AbstractContextManager]:
    """A factory of the precision context: bf16 autocast on `device`, or nothing for fp32.

    Args:
        device: where the model runs.
        precision: "auto", "bf16" or "fp32" ("auto" resolved by `resolve_precision`).
    """
    device = torch.device(device)
    if resolve_precision(precision, device) == "bf16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext


def resolve_compile(setting: bool | str, device: str | torch.device, hooks: bool = False) -> bool:
    """Whether a training step runs under `torch.compile`: `setting` true/false as given;
    "auto" = on CUDA with Triton present, unless the step has tensor hooks (`hooks`, e.g. gradient
    path tracking) or TYING_COMPILE=0; off on the CPU (compilation costs minutes there and
    gains little at CPU sizes).

    Raises:
        ValueError: a setting other than true, false or "auto".
    """
    if setting not in (True, False, "auto"):
        raise InvalidInputError(f"compile must be true, false or auto, got {setting!r}")
    if setting != "auto":
        return bool(setting)
    if torch.device(device).type != "cuda" or hooks or os.environ.get("TYING_COMPILE") == "0":
        return False
    from torch.utils._triton import has_triton

    return has_triton()
