"""A run's weights and optimizer state in a checkpoint, through torch.distributed.checkpoint.

`ModelWeights` is the loop's `RunWeights` of a whole model: full, unsharded state dicts on the
CPU (collectives under FSDP). `tying.train.run.TrainWeights` adds distillation's parameter
names; `tying.update.finetune.AdapterWeights` saves the adapter tensors only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tying.train.optim import Optimizers


class ModelWeights:
    """The whole model and its optimizers' state (see the module docstring).

    Args:
        model: the unwrapped module whose parameters the optimizers train (their state's names).
        optimizer: the run's optimizers.
    """

    def __init__(self, model: nn.Module, optimizer: Optimizers) -> None:
        self.model, self.optimizer = model, optimizer

    def model_state(self) -> dict[str, torch.Tensor]:
        """The model's tensors by name, on the CPU."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        return get_model_state_dict(
            self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )

    def optimizer_state(self) -> dict[str, Any]:
        """The optimizers' state and parameter groups, by parameter name, on the CPU."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        return get_optimizer_state_dict(
            self.model,
            self.optimizer.optimizers,
            options=StateDictOptions(full_state_dict=True, cpu_offload=True),
        )

    def load(self, model_state: dict[str, torch.Tensor], optimizer_state: dict[str, Any]) -> None:
        """The optimizer state, then the weights."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        # Optimizer first: initialising its state runs a zero-lr step, which a Riemannian
        # optimizer ends with a retraction (a rounding-level change of Z); the model's
        # weights are loaded after it, so they are exactly the saved ones.
        set_optimizer_state_dict(
            self.model,
            self.optimizer.optimizers,
            optimizer_state,
            options=StateDictOptions(full_state_dict=True),
        )
        self.load_model(model_state)

    def load_model(self, model_state: dict[str, torch.Tensor]) -> None:
        """The weights of a checkpoint (after the optimizer state)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(
            self.model, model_state, options=StateDictOptions(full_state_dict=True)
        )
