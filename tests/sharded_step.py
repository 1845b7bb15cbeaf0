"""One training step under each sharding strategy, its updated parameters saved whole.

    python -m tests.sharded_step torch OUT   # as a rank: RANK, WORLD_SIZE, MASTER_* set
    python -m tests.sharded_step jax OUT     # one process, XLA_FLAGS making 2 host devices
    python -m tests.sharded_step baseline OUT  # torch, one process: the reference

Run in processes of their own by tests/test_sharding.py: ranks need a process group, and
JAX's host devices are fixed at import.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from membench import registry
from membench.backends import BuildSpec

WORKLOAD, BATCH, WORLD = "transformer", 4, 2
TORCH = ("ddp", "zero1", "fsdp-zero2", "fsdp")
JAX = ("ddp", "fsdp")


def spec(strategy: str, world: int) -> BuildSpec:
    size = registry.preset("smoke").size(WORKLOAD)
    return BuildSpec(WORKLOAD, registry.strategy(strategy), size, BATCH, world_size=world)


def torch_steps(out: Path, strategies: tuple[str, ...], world: int) -> None:
    from membench.backends.torch_backend import TorchBackend, sharding

    for name in strategies:
        session = TorchBackend().build(spec(name, world))
        session.step()
        # every parameter whole (gathered where sharded: a collective on every rank)
        params = {k: v.numpy() for k, v in sharding.full_parameters(session.model).items()}
        if session.rank == 0:
            np.savez(out / f"torch-{name}.npz", **params)


def jax_steps(out: Path) -> None:
    import jax

    from membench.backends.jax_backend import JaxBackend

    for name, world in [("baseline", 1), *((s, WORLD) for s in JAX)]:
        session = JaxBackend().build(spec(name, world))
        session.step()
        leaves = jax.tree_util.tree_leaves_with_path(session.params)
        params = {jax.tree_util.keystr(k): np.asarray(v) for k, v in leaves}
        np.savez(out / f"jax-{name}.npz", **params)


if __name__ == "__main__":
    kind, out = sys.argv[1], Path(sys.argv[2])
    if kind == "torch":
        torch_steps(out, TORCH, WORLD)
    elif kind == "baseline":
        torch_steps(out, ("baseline",), 1)
    else:
        jax_steps(out)
