"""`ExperimentConfig` and its sections: defined in the torch-free schema layer,
`tying.options.experiment` (so that `tying experiment` checks a grid before torch loads), and
re-exported here."""

from __future__ import annotations

from tying.options.experiment import (
    GRID_KEYS,
    UPDATE_OWN_KEYS,
    AnalysisSettings,
    ExperimentConfig,
    LensSettings,
    RunSpec,
    UpdateSettings,
    load_experiment,
)

__all__ = [
    "GRID_KEYS",
    "UPDATE_OWN_KEYS",
    "AnalysisSettings",
    "ExperimentConfig",
    "LensSettings",
    "RunSpec",
    "UpdateSettings",
    "load_experiment",
]
