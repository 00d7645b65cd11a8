"""The training options of each interface (`TransposeOptions`, `PitOptions`, the fit's
`FitOptions`, the one list of t_init choices): defined in the torch-free schema layer,
`tying.options.interface`, and re-exported here."""

from __future__ import annotations

from tying.options.interface import (
    ENTRY_SIZE,
    FIT_PARAMETERS,
    INTERFACE_SECTIONS,
    PIT_INITS,
    T_OPTIMIZERS,
    T_SCALE_AUTO,
    Z_OPTIMIZERS,
    FitOptions,
    PitOptions,
    TInit,
    TOptimizer,
    TransposeOptions,
    ZOptimizer,
)

__all__ = [
    "ENTRY_SIZE",
    "FIT_PARAMETERS",
    "INTERFACE_SECTIONS",
    "PIT_INITS",
    "T_OPTIMIZERS",
    "T_SCALE_AUTO",
    "Z_OPTIMIZERS",
    "FitOptions",
    "PitOptions",
    "TInit",
    "TOptimizer",
    "TransposeOptions",
    "ZOptimizer",
]
