"""The training step the benchmarks time: `tying.train.loop.train_step` itself, on a `Run` built
the way `tying.train.run` builds one (its optimizers, PIT's retraction, autocast, compilation and
gradient-path tracker chosen from a `TrainConfig`), over a fixed list of host micro-batches.

So a benchmark times what `tying train` runs (host id checks, the copy to the device, every
micro-batch's forward and backward under the run's precision, clipping, the step's one host
sync, the optimizers and their hooks), not a copy of it that could drift from it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tying.config import load_config
from tying.devices import autocast_for, resolve_compile
from tying.train.config import TrainConfig
from tying.train.distributed import DistInfo
from tying.train.loop import LoopSettings, Run, StepOutcome, train_step
from tying.train.optim import OptimizerSettings, attach_retraction_for_run, optimizers_for_run
from tying.train.run import TrainWeights

#: The learning rate of every timed step (the loop's schedule is not run: its first steps'
#: warm-up rates would leave the weights, and so the losses some benchmarks record, unmoved).
LR = 1e-4


def train_config(overrides: Sequence[str] = ()) -> TrainConfig:
    """A `TrainConfig` from `key=value` overrides, as `tying train KEY=VALUE ...` reads them."""
    return load_config(TrainConfig, None, list(overrides))


class CyclingBatches:
    """Host micro-batches served in turn, over and over (a `tying.train.loop.Batches`).

    Args:
        batches: (inputs, targets) pairs, each (B, T) int64 token ids on the CPU.
    """

    def __init__(self, batches: Sequence[tuple[Tensor, Tensor]]) -> None:
        if not batches:
            raise ValueError("CyclingBatches needs at least one micro-batch")
        self.batches = list(batches)
        self.index = 0

    def next_batch(self) -> tuple[Tensor, Tensor]:
        batch = self.batches[self.index % len(self.batches)]
        self.index += 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.index = int(state["index"])


def project_step(
    model: nn.Module,
    cfg: TrainConfig,
    batches: Sequence[tuple[Tensor, Tensor]],
    *,
    accum: int | None = None,
    device: str | torch.device = "cpu",
    forward: Callable[[Tensor, Tensor], Tensor] | None = None,
    vocab_size: int | None = None,
) -> Callable[[], StepOutcome]:
    """One optimizer step of `model` as `tying train` takes it, as a function of no arguments.

    The model goes to `device`; its optimizers are the run's (`optimizers_for_run`: AdamW
    groups, fused on CUDA, or PIT's Riemannian ones), with PIT's polar retraction attached
    (`attach_retraction_for_run`) and the learning rate set to `LR`; the forward runs under
    `cfg.precision` and is compiled when `resolve_compile(cfg.compile, device, hooks=...)` says
    so; a `GradientPathTracker` follows the interface when `cfg.track_gradient_paths`. Each call
    runs `tying.train.loop.train_step` on the next `accum` micro-batches (cycling) and returns its
    `StepOutcome` (loss, gradient norm, tokens, the tracker's row).

    Args:
        model: the unwrapped model (`forward(inputs, targets)` -> mean loss; `.interface`).
        cfg: the run's settings (tie and its section, lr groups, clipping, precision, compile).
        batches: host (inputs, targets) micro-batches, (B, T) token ids each.
        accum: micro-batches per step (default: all of `batches`).
        device: where the step runs (batches are copied there by the step, as in training).
        forward: the step function, if not `model` itself (e.g. a transformers model's own
            loss: `lambda x, y: model(input_ids=x, labels=x).loss`).
        vocab_size: V the ids are checked against (default: `model.interface.vocab_size`, or
            `model.config.vocab_size` for a transformers model).
    """
    device = torch.device(device)
    model.to(device)
    optimizer = optimizers_for_run(model, cfg)
    attach_retraction_for_run(model, optimizer, cfg)
    optimizer.set_lr(LR)
    tracker = None
    if cfg.track_gradient_paths:
        from tying.analysis.gradient_paths import GradientPathTracker

        tracker = GradientPathTracker(model.interface)
    step_forward = forward if forward is not None else model
    compiled = resolve_compile(cfg.compile, device, hooks=cfg.track_gradient_paths)
    if vocab_size is None:  # our models: the interface's V; a transformers model: its config's
        interface = getattr(model, "interface", None)
        vocab_size = interface.vocab_size if interface is not None else model.config.vocab_size
    run = Run(
        # Read only when a step diverges (to name the last checkpoint): nothing is written.
        folder=Path(tempfile.gettempdir()) / "tying-benchmark-step",
        info=DistInfo(rank=0, world_size=1, local_rank=0, device=device),
        forward=torch.compile(step_forward) if compiled else step_forward,
        module=model,
        parameters=list(model.parameters()),
        optimizer=optimizer,
        batches=CyclingBatches(batches),
        weights=TrainWeights(model, optimizer),
        vocab_size=vocab_size,
        autocast=autocast_for(device, cfg.precision),
        tracker=tracker,
    )
    settings = LoopSettings(
        max_steps=cfg.max_steps,
        optim=OptimizerSettings.of(cfg),
        accum=accum if accum is not None else len(batches),
    )
    done = 0

    def step() -> StepOutcome:
        nonlocal done
        done += 1
        return train_step(run, settings, done)

    return step
