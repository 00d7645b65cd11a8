"""Every shipped experiment config loads and validates (every cell's TrainConfig and the update
stage's option sections), so a key renamed in the code cannot leave a config broken."""

from __future__ import annotations

from pathlib import Path

import pytest

from tying.experiment import load_experiment
from tying.paths import repo_root

CONFIGS = sorted((repo_root() / "configs" / "experiments").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_experiment_config_loads(path: Path) -> None:
    load_experiment(path)  # raises ConfigError naming the key on any invalid value
