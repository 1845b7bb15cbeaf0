"""PyTorch's data parallelism the way its own documentation sets it up: one process per rank,
a process group from torchrun's environment (gloo on CPUs, nccl on GPUs),
DistributedDataParallel for replicated state, ZeroRedundancyOptimizer over a DDP model for
ZeRO-1, and FSDP2's fully_shard per block and on the root for ZeRO-2/3. Imported by the torch
backend only, after the worker has set the environment.
"""

from __future__ import annotations

import atexit
import inspect
import os
from typing import Any

from membench.backends import Implemented

HOW = {
    "replicated": "DistributedDataParallel(gradient_as_bucket_view=True): gradients are views "
    "into its all-reduce buckets, not a second copy",
    "zero1": "DistributedDataParallel + torch.distributed.optim.ZeroRedundancyOptimizer (the "
    "model's optimizer class and parameter groups, state sharded over the ranks)",
    "zero2": "FSDP2 fully_shard(reshard_after_forward=False) on each block, then on the root",
    "zero3": "FSDP2 fully_shard(reshard_after_forward=True) on each block, then on the root",
}
SUPPORT = {
    value: Implemented(f"{how}; gloo on CPUs, nccl on GPUs, a process per rank")
    for value, how in HOW.items()
}


def init_process_group(torch: Any) -> tuple[int, int, Any]:
    """(rank, world size, device) of this rank, its process group joined (torchrun's env)."""
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device, backend = torch.device("cuda", local), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
        atexit.register(dist.destroy_process_group)
    return rank, world, device


def rank_slice(batch: Any, rank: int, world: int) -> Any:
    """This rank's contiguous share of the global batch."""
    n = batch.shape[0] // world
    return batch[rank * n : (rank + 1) * n]


def shard_units(model: Any) -> list[Any]:
    """The modules FSDP gathers one at a time: each block of the workload's model."""
    return list(getattr(model, "blocks", []))


def wrap(model: Any, sharding: str, device: Any) -> Any:
    """The module the step calls: DDP's wrapper, or the model FSDP2 sharded in place."""
    if sharding in ("replicated", "zero1"):
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True)
    from torch.distributed.fsdp import fully_shard

    reshard = sharding == "zero3"
    for unit in shard_units(model):
        fully_shard(unit, reshard_after_forward=reshard)
    fully_shard(model, reshard_after_forward=reshard)
    return model


def zero_optimizer(optimizer: Any) -> Any:
    """ZeroRedundancyOptimizer over the parameters of the model's own optimizer: its class,
    its defaults and each parameter group's settings."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    # the constructor's own arguments (AdamW's defaults also hold decoupled_weight_decay)
    accepted = inspect.signature(type(optimizer).__init__).parameters
    defaults = {k: v for k, v in optimizer.defaults.items() if k in accepted}
    groups = [
        {k: v for k, v in g.items() if k == "params" or (k in accepted and v != defaults.get(k))}
        for g in optimizer.param_groups
    ]
    return ZeroRedundancyOptimizer(groups, optimizer_class=type(optimizer), **defaults)


def local(t: Any) -> Any:
    """A tensor's shard on this rank (itself where it is not a DTensor)."""
    return t.to_local() if hasattr(t, "to_local") else t


def optimizer_state(optimizer: Any) -> dict:
    """The optimizer state this rank holds (ZeroRedundancyOptimizer: its local optimizer's)."""
    inner = getattr(optimizer, "optim", optimizer)
    return inner.state


def all_ranks(torch: Any, flag: bool, device: Any) -> bool:
    """flag on every rank (an all-reduce of 0/1 with MIN)."""
    import torch.distributed as dist

    t = torch.tensor([int(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def full_parameters(model: Any) -> dict[str, Any]:
    """Every parameter whole, gathered from the shards where sharded (for tests)."""
    return {
        n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
        for n, p in model.named_parameters()
    }
