"""Training: config, the one loop (shared with `tying finetune`), the training run, checkpoints,
metrics, distributed setup."""

from tying.train.config import TrainConfig
from tying.train.loop import DivergenceError
from tying.train.run import TrainResult, train

__all__ = ["DivergenceError", "TrainConfig", "TrainResult", "train"]
