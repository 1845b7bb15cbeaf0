"""JAX's data parallelism the way its documentation writes it: one process, a `Mesh` over W
devices with one `data` axis, arrays placed with `NamedSharding`, and one jitted step that
XLA's SPMD partitioner splits. `dp`: parameters and optimizer state replicated, the batch
sharded along `data`. `fsdp`: parameters and optimizer state sharded along `data` too (each
array on its largest axis that W divides; XLA gathers them where the step needs them). On CPUs
the W devices are host devices (XLA_FLAGS=--xla_force_host_platform_device_count=W, before
import). Imported by the JAX backend only, after the worker has set the environment.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from membench.backends import Implemented, Unsupported

AXIS = "data"
HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"
SUPPORT: dict[object, Implemented | str] = {
    "replicated": Implemented(
        "dp: Mesh over W devices, the batch sharded along its data axis with NamedSharding, "
        "parameters and optimizer state replicated; one jitted step (XLA SPMD)"
    ),
    "zero1": "JAX shards arrays, not optimizer stages: sharding the optimizer state while the "
    "gradients stay whole is not a layout JAX's API names; its data-parallel layouts are dp "
    "(replicated) and fsdp (parameters and optimizer state sharded)",
    "zero2": "JAX shards arrays, not optimizer stages: where a sharded parameter's gradient and "
    "gathered copy live inside the step is XLA's partitioner's choice, so FSDP without "
    "resharding is not a distinct layout (the fsdp strategy is JAX's sharded one)",
    "zero3": Implemented(
        "fsdp: Mesh over W devices, the batch, parameters and optimizer state sharded along the "
        "data axis with NamedSharding (each array on its largest axis W divides); XLA gathers "
        "them inside the jitted step"
    ),
}


def host_devices_env(world_size: int, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """XLA_FLAGS that make W host devices (kept flags first)."""
    kept = [f for f in environ.get("XLA_FLAGS", "").split() if not f.startswith(HOST_DEVICES_FLAG)]
    return {"XLA_FLAGS": " ".join([*kept, f"{HOST_DEVICES_FLAG}={world_size}"])}


def mesh(jax: Any, world_size: int) -> Any:
    """A one-axis Mesh over the first W devices (Unsupported where there are fewer)."""
    import numpy as np

    devices = jax.devices()
    if len(devices) < world_size:
        raise Unsupported(f"{world_size} ranks need {world_size} devices; JAX sees {len(devices)}")
    return jax.sharding.Mesh(np.array(devices[:world_size]), (AXIS,))


def spec_for(shape: tuple[int, ...], world_size: int, shard: bool) -> Any:
    """The PartitionSpec of one array: its largest axis that W divides along `data` (when
    sharding), else replicated."""
    from jax.sharding import PartitionSpec as P

    axes = [i for i, n in enumerate(shape) if n % world_size == 0 and n >= world_size]
    if not shard or not axes:
        return P()
    axis = max(axes, key=lambda i: shape[i])
    return P(*[AXIS if i == axis else None for i in range(len(shape))])


def shardings(jax: Any, tree: Any, m: Any, shard: bool) -> Any:
    """A NamedSharding for every array of a tree."""
    world = m.devices.size
    return jax.tree_util.tree_map(
        lambda a: jax.sharding.NamedSharding(m, spec_for(a.shape, world, shard)), tree
    )


def batch_sharding(jax: Any, m: Any, ndim: int) -> Any:
    from jax.sharding import PartitionSpec as P

    return jax.sharding.NamedSharding(m, P(AXIS, *([None] * (ndim - 1))))


def constrained(jax: Any, step: Callable, params_sh: Any, stats_sh: Any, opt_sh: Any) -> Callable:
    """The train step with its new state held to the state's layout (sharded state stays
    sharded; without the constraint XLA may choose another)."""

    def wrapped(params, stats, opt_state, dynamic_scale, x, y, train_bn=True):
        params, stats, opt_state, *rest = step(
            params, stats, opt_state, dynamic_scale, x, y, train_bn
        )
        keep = jax.lax.with_sharding_constraint
        return (keep(params, params_sh), keep(stats, stats_sh), keep(opt_state, opt_sh), *rest)

    return wrapped


def device_bytes(jax: Any, tree: Any) -> dict[Any, int]:
    """Bytes of a tree's shards on each device."""
    out: dict[Any, int] = {}
    for a in jax.tree_util.tree_leaves(tree):
        for s in a.addressable_shards:
            out[s.device] = out.get(s.device, 0) + int(s.data.size) * s.data.dtype.itemsize
    return out


def live_bytes(jax: Any) -> dict[Any, int]:
    """Bytes of every live array's shards on each device (jax.live_arrays)."""
    return device_bytes(jax, [a for a in jax.live_arrays() if not a.is_deleted()])
