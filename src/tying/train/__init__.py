"""Training: config, the one loop (shared with `tying finetune`), the training run, checkpoints,
metrics, the run folder's lock, distributed setup."""

from tying.train.config import TrainConfig
from tying.train.lock import RunFolderInUseError
from tying.train.loop import DivergenceError
from tying.train.run import TrainResult, train

__all__ = ["DivergenceError", "RunFolderInUseError", "TrainConfig", "TrainResult", "train"]
