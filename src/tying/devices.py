"""Device and precision: one convention for every verb, resolved here and nowhere else.

- device "auto" (or None): CUDA when present, else the CPU; a device named explicitly is
  used as named, and CUDA asked for where there is none is bad input (a ValueError saying to
  use cpu or auto), never a silent fall-back to the CPU: a run planned for a GPU must not
  start on the CPU unnoticed;
- compile "auto": `torch.compile` on CUDA with Triton (not on the CPU, not with per-step
  tensor hooks, not with TYING_COMPILE=0);
- precision "auto": bf16 autocast where the hardware multiplies bf16 natively (a CUDA GPU with
  bf16, or a CPU with native bf16 dot products: the x86 flags avx512_bf16 or amx_bf16, the Arm
  flag bf16; `cpu_bf16_support`), else fp32. A CPU with AVX2 only, or AVX-512 without BF16,
  runs bf16 matrix products emulated, several times slower than fp32 (oneDNN still reports
  "bf16 supported" there), so no path picks bf16 on it unless the user asks for it.
  `TYING_CPU_BF16=0` (or 1) overrides the detection, e.g. to test the AVX2 behaviour on a CPU
  that has fast bf16. Factorizations, log-sum-exp, KL and losses always run in float32/float64
  whatever the autocast dtype. Every verb's options declare `precision: Precision = "auto"`.
"""

from __future__ import annotations

import functools
import os
import platform
import typing
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
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


#: Environment variable overriding the CPU bf16 detection: "1" fast, "0" not fast (unset: detect).
CPU_BF16_ENV = "TYING_CPU_BF16"
#: CPU flags (/proc/cpuinfo) of native bf16 dot products: x86 AVX512-BF16 and AMX, Arm BF16.
FAST_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def cpu_bf16_support() -> tuple[bool, str]:
    """(fast, why): whether this CPU multiplies bf16 natively, and on what that rests.

    Fast means a native bf16 dot-product instruction (`FAST_BF16_FLAGS` in the CPU flags);
    without one (AVX2 only, or AVX-512 without BF16) bf16 autocast is emulated and runs
    several times slower than fp32. `TYING_CPU_BF16=1` or `=0` overrides the detection.

    Returns:
        (True, "avx512_bf16, amx_bf16") / (False, "no avx512_bf16/amx_bf16 (avx2)") /
        (fast, "TYING_CPU_BF16=0"): `why` names the flags found, the ones missing with the
        widest vector unit there is, or the override.
    """
    override = os.environ.get(CPU_BF16_ENV, "").strip()
    if override in ("0", "1"):
        return override == "1", f"{CPU_BF16_ENV}={override}"
    return _detected_cpu_bf16()


@functools.cache
def _detected_cpu_bf16() -> tuple[bool, str]:
    flags = cpu_flags()
    if flags is None:  # no /proc/cpuinfo (macOS, Windows): ask oneDNN
        try:
            fast = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            fast = False
        return fast, f"oneDNN on {platform.machine() or 'this CPU'}: {'yes' if fast else 'no'}"
    found = [flag for flag in FAST_BF16_FLAGS if flag in flags]
    if found:
        return True, ", ".join(found)
    widest = next((f for f in ("avx512f", "avx2", "avx", "sve", "asimd") if f in flags), "none")
    return False, f"no avx512_bf16/amx_bf16 ({widest})"


def cpu_flags() -> set[str] | None:
    """The flags of the first processor in /proc/cpuinfo ("flags" on x86, "Features" on Arm),
    or None where there is no such file."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return None


def cpu_has_fast_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (see `cpu_bf16_support`)."""
    return cpu_bf16_support()[0]


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
    return triton_compiles_for(torch.device(device))


def triton_compiles_for(device: torch.device) -> bool:
    """Whether Inductor can generate Triton kernels for CUDA `device`: the triton package is
    installed and the GPU's compute capability is at least 7.0 (the CUDA test of torch's
    `torch.utils._triton.has_triton`, without its imports of triton and torch._dynamo: on this
    project's CPU, importing torch._dynamo after torch takes about 1.5 s of CPU more than
    `import torch`'s 1.5 s, and on a lent H100 machine `tying info` took 11-13 s of CPU while
    it asked has_triton, against 5.7-6.6 s for `import torch`)."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return False
    return torch.cuda.get_device_capability(device)[0] >= 7
