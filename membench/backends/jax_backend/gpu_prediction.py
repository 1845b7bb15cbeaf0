"""A JAX cell's GPU memory predicted on a host without a GPU: the suite's own session built on
the CPU, its step (the JaxComputation the worker compiles, with the same donation and dtype
policy) compiled by XLA's GPU compiler for the card's target description, and the executable's
buffer assignment read (memory_analysis), nothing run.

    python -m membench.backends.jax_backend.gpu_prediction '<request as JSON>'

prints one JSON line (membench.gpu_predict reads it). It needs a jaxlib with its CUDA plugin
(requirements/predict.txt; no GPU): JAX runs on the CPU (JAX_PLATFORMS=cpu, or the plugin
would fail to start) while the topology is the card's.

The allocated figure is what the executable holds while it runs (arguments, outputs not
aliased to a donated argument, temporaries) plus the inputs the session keeps resident
beside the call (accumulation's other micro-batches), as peak_bytes_in_use counts them.
What is not modelled: cuDNN's autotuned algorithms and their workspaces (XLA without a device
picks without timing). XLA's fitting of the step to a memory limit is: the description's
device memory makes its scheduler plan for the request's limit (cards.xla_target_config).

The session's CPU compiles (the parameters' init, the same at every batch: 8 of a compile's 40
seconds on two cores) are kept in JAX's persistent cache (INIT_CACHE) across predictions; the
GPU compile never is: each prediction compiles the step for its card.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from membench.metrics import ANALYTIC_FLOOR_BYTES

INIT_CACHE = Path.home() / ".cache" / "membench" / "jax-predict-cpu"


def predict(request: dict[str, Any]) -> dict[str, Any]:
    from membench import registry
    from membench.backends import BuildSpec, Unsupported, set_up_process
    from membench.backends.jax_backend.compiled_memory import resident_input_bytes, xla_buffers
    from membench.records import Cell

    cell = Cell.from_dict(request["cell"])
    spec = BuildSpec.of(cell)
    backend = registry.load_backend("jax")
    if reason := backend.refusal(spec, "cuda"):
        raise Unsupported(reason)
    if spec.world_size > 1 or spec.strategy.lengths != "fixed":
        raise Unsupported("one executable on one device only (no sharding, no varying lengths)")
    # the GPU cell's settings (matmul precision among them), but JAX itself on the CPU
    cuda_env = backend.env_vars(spec.strategy, "cuda")
    set_up_process(backend, spec.strategy)
    os.environ.update({k: v for k, v in cuda_env.items() if k.startswith("JAX_DEFAULT_MATMUL")})
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    t0 = time.perf_counter()
    topology = topologies.get_topology_desc(
        platform="cuda", target_config=request["card"]["xla_target_config"], topology="1x1x1"
    )
    device = topology.devices[0]
    session = _built(backend, spec)
    where = SingleDeviceSharding(device)

    def abstract(a: Any) -> Any:
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=where) if hasattr(a, "shape") else a

    s, c = session, session.computation
    x, y = s.batches[0]
    if spec.strategy.mode == "infer":
        args = jax.tree_util.tree_map(abstract, (s.params, s.batch_stats, x))
        compiled = jax.jit(c.infer_step).lower(*args).compile()
    else:
        state = (s.params, s.batch_stats, s.opt_state, s.dynamic_scale, x, y)
        compiled = c.jitted_train_step().lower(*jax.tree_util.tree_map(abstract, state)).compile()
    buffers = xla_buffers(compiled)
    if buffers is None:
        raise RuntimeError("XLA gave no memory analysis for the compiled step")
    resident = resident_input_bytes(session) - (
        0 if s.host_batch is None else sum(a.nbytes for xy in s.host_batch for a in xy)
    )
    held = buffers.argument + buffers.output - buffers.alias + buffers.temp
    return {
        "allocated_bytes": held + resident,
        "reserved_bytes": None,  # XLA's allocator keeps no reserve the records read
        "xla": {
            "argument": buffers.argument, "output": buffers.output, "alias": buffers.alias,
            "temp": buffers.temp, "generated_code": buffers.generated_code,
        },
        "resident_input_bytes": resident,
        ANALYTIC_FLOOR_BYTES: session.static_metrics()[ANALYTIC_FLOOR_BYTES],
        "seconds": time.perf_counter() - t0,
        "notes": {"compiled_for": request["card"]["name"], "device": str(device)},
    }  # fmt: skip


def _built(backend: Any, spec: Any) -> Any:
    """The suite's session, its CPU compiles from the persistent cache where they are there;
    the cache is off again after it (the GPU compile is made, never read back)."""
    import jax
    from jax._src import compilation_cache

    jax.config.update("jax_compilation_cache_dir", str(INIT_CACHE))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    try:
        return backend.build(spec)
    finally:
        jax.config.update("jax_enable_compilation_cache", False)
        compilation_cache.reset_cache()  # it decides once a process whether it is used


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("request", help='{"cell": {...}, "card": {...}} as JSON')
    args = parser.parse_args(argv)
    from membench.backends.answer_line import print_answer

    def version() -> str:
        import jax

        return jax.__version__

    return print_answer(lambda: predict(json.loads(args.request)), version)


if __name__ == "__main__":
    sys.exit(main())
