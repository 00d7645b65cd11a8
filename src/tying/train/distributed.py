"""Process-group setup and model wrapping for torchrun (DDP or FSDP2); no-ops in one process."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from tying.config import ConfigError


@dataclass(frozen=True)
class DistInfo:
    """Where this process stands: rank, world size and its device."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed() -> DistInfo:
    """Join the process group that torchrun describes (RANK/WORLD_SIZE/LOCAL_RANK), if any.

    Backend: NCCL when CUDA is available, gloo otherwise. One process: nothing to join.

    Raises:
        ConfigError: torchrun started more processes on this machine than it has GPUs (each
            process trains on the GPU of its local rank).
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        gpus = torch.cuda.device_count()
        if local_rank >= gpus:
            raise ConfigError(
                f"torchrun started process {local_rank + 1} on a machine with {gpus} GPU(s): "
                f"start at most {gpus} per node, or hide the GPUs (CUDA_VISIBLE_DEVICES=) to "
                "train on the CPU (gloo)"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, device=device)


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def all_reduce_mean(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Mean of a tensor over all processes (returns the input in one process)."""
    if not info.enabled:
        return value
    out = value.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / info.world_size


def wrap_model(model: nn.Module, info: DistInfo, mode: str) -> nn.Module:
    """DDP or FSDP2 wrapping when world_size > 1; the model itself otherwise.

    FSDP2: each transformer block is its own unit; the root unit holds the rest,
    including the whole token interface, so that a tied matrix (used by the
    lookup at the start and by the head at the end) is gathered once per step.
    DDP: buffers are not re-broadcast each step (PIT's frozen Z is identical on
    every rank from the seeded construction, checked at wrap time by DDP).
    """
    if not info.enabled:
        return model
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [info.local_rank] if info.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids, broadcast_buffers=False)
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in blocks_of(model):
            fully_shard(block)
        fully_shard(model)
        return model
    raise ValueError(f"distributed mode must be 'ddp' or 'fsdp', got {mode!r}")


def blocks_of(model: nn.Module) -> nn.ModuleList:
    """The transformer blocks of a model (`model.blocks`), for FSDP units."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise ValueError(f"{type(model).__name__} has no `blocks` ModuleList to shard with FSDP")
    return blocks


def unwrap(model: nn.Module) -> nn.Module:
    """The module under a DDP or torch.compile wrapper."""
    inner = getattr(model, "module", model)
    return getattr(inner, "_orig_mod", inner)


def cleanup(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
