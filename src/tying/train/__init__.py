"""Training: config, loop, checkpoints, metrics, distributed setup."""

from tying.train.config import TrainConfig
from tying.train.loop import DivergenceError, TrainResult, train

__all__ = ["DivergenceError", "TrainConfig", "TrainResult", "train"]
