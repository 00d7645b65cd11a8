"""Training: config, loop, checkpoints, metrics, distributed setup."""

from tying.train.config import TrainConfig

__all__ = ["TrainConfig"]
