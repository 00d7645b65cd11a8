"""`TrainConfig` (every knob of `tying train`) and its `DistillConfig` section, defined in the
torch-free `tying.options.train`, and `saved_train_config`, the config of a saved run."""

from __future__ import annotations

from typing import Any

from tying.config import from_dict, lift_moved_keys
from tying.interface import interface_class, ties
from tying.interface.options import (
    ENTRY_SIZE,
    T_OPTIMIZERS,
    T_SCALE_AUTO,
    Z_OPTIMIZERS,
    TOptimizer,
    ZOptimizer,
)
from tying.options.train import INITIAL, DistillConfig, TrainConfig

__all__ = [
    "ENTRY_SIZE",
    "INITIAL",
    "T_OPTIMIZERS",
    "T_SCALE_AUTO",
    "Z_OPTIMIZERS",
    "DistillConfig",
    "TOptimizer",
    "TrainConfig",
    "ZOptimizer",
    "saved_train_config",
]


def saved_train_config(data: dict[str, Any], source: str) -> TrainConfig:
    """The `TrainConfig` of a saved run (config.yaml, trainer.json).

    Flat keys of earlier versions (`pit_t_scale`, `input_grad_scale`, ...) are moved into their
    section without a warning (the project wrote them), and the options of other interfaces
    than the run's own are dropped: earlier versions kept them (e.g. `t_init: output` in a TT
    run, where it had no effect), and the run must still load. Everything else is validated
    as in `from_dict`.
    """
    data = lift_moved_keys(TrainConfig, dict(data), source, warn=False)
    tie = str(data.get("tie", TrainConfig.tie))
    if tie in ties():
        for other in ties():
            if other != tie and interface_class(other).options_class is not None:
                data.pop(other, None)
    return from_dict(TrainConfig, data, source=source)
