"""The interface matrices of every checkpoint of a training run (for drift)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from safetensors import safe_open
from torch import Tensor, nn

from tying.errors import InvalidInputError
from tying.interface.base import TokenInterface
from tying.probe.matrices import checkpoint_step, materialize


def module_prefix(model: nn.Module, module: nn.Module) -> str:
    """The state-dict prefix of `module` inside `model` (e.g. "interface.").

    Raises:
        ValueError: `module` is not a submodule of `model`.
    """
    for name, sub in model.named_modules():
        if sub is module:
            return f"{name}." if name else ""
    raise InvalidInputError(f"{type(module).__name__} is not a submodule of {type(model).__name__}")


def run_checkpoints(checkpoint: str | Path) -> list[Path]:
    """The checkpoints of the run of `checkpoint` up to and including it, oldest first."""
    from tying.train.checkpoint import list_checkpoints

    checkpoint = Path(checkpoint)
    step = checkpoint_step(checkpoint)
    found = list_checkpoints(checkpoint.parent.parent)
    return [p for p in found if checkpoint_step(p) <= step]


def checkpoint_matrices(
    model: nn.Module, interface: TokenInterface, checkpoints: list[Path]
) -> Iterator[tuple[int, Tensor, Tensor]]:
    """(step, E, U) of each checkpoint, read into a copy of `interface` (the model is untouched).

    Only the interface's tensors are read from each ``model.safetensors`` (for PIT: Z and L;
    E and U are then materialized as in `tying.probe.matrices.materialize`).

    Args:
        model: the model the checkpoints were saved from (a `Decoder` or an `HFCausalLM` of a
            teacher-mode run), to find the interface's key prefix.
        interface: its interface.
        checkpoints: checkpoint folders (each holding ``model.safetensors``).

    Yields:
        (step, E (V, d), U (V, d)) per checkpoint, in the given order.

    Raises:
        ValueError: a checkpoint lacks one of the interface's tensors (written by another
            model).
    """
    prefix = module_prefix(model, interface)
    target = copy.deepcopy(interface).cpu()
    keys = list(target.state_dict())
    for folder in checkpoints:
        state: dict[str, Tensor] = {}
        with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
            stored = set(f.keys())
            for key in keys:
                name = prefix + key
                if name not in stored:
                    raise InvalidInputError(
                        f"{folder / 'model.safetensors'} has no tensor {name!r}: this "
                        "checkpoint was not written by the probed model; give the checkpoints "
                        "of the same run"
                    )
                state[key] = f.get_tensor(name)
        target.load_state_dict(state)
        E, U = materialize(target)  # may share storage with `target`: copy before the next load
        E_copy = E.clone()
        yield checkpoint_step(folder), E_copy, E_copy if U is E else U.clone()


def drift_inputs(loaded: Any) -> list[Path]:
    """The checkpoints a drift view of `loaded` covers: its run's checkpoints up to the one
    loaded ([] for a model that is not a training run)."""
    if loaded.kind != "run" or loaded.checkpoint is None:
        return []
    return run_checkpoints(loaded.checkpoint)
