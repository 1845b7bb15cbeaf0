"""What the worker reads off a JAX session: XLA's process-wide peak, JAX's device memory profile,
sizes of the resident trees with XLA's view of the compiled step, the notes, and each Mesh
device's share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from membench.backends import Readings
from membench.backends.jax_backend import sharding as jax_sharding
from membench.backends.jax_backend.support import DTYPES
from membench.backends.readings import MODEL_STATE  # a rank's model state between steps
from membench.metrics import (
    DEVICE_LIVE_BUFFER_BYTES,
    GRADIENT_BYTES,
    MODEL_STATE_BYTES,
    OPTIMIZER_STATE_BYTES,
    PARAMETER_BYTES,
    PEAK_DEVICE_ALLOCATED_BYTES,
    TRAINABLE_PARAMETERS,
    XLA_FLOPS,
)

if TYPE_CHECKING:
    from pathlib import Path


def tree_bytes(tree: Any) -> int:
    import jax

    return sum(int(a.size) * a.dtype.itemsize for a in jax.tree_util.tree_leaves(tree))


class JaxReadings(Readings):
    def memory(self) -> dict[str, float]:
        device = self.session.jax.devices()[0]
        stats = device.memory_stats() if device.platform == "gpu" else None
        if not stats:
            return {}  # XLA:CPU keeps no allocator statistics
        # XLA's peak cannot be reset: it is the whole process's, first step included.
        return {PEAK_DEVICE_ALLOCATED_BYTES: float(stats.get("peak_bytes_in_use", 0))}

    def marked_step_phases(self) -> str:
        return (
            "the step as one phase: one jitted function (XLA compiles forward, backward and "
            "update together and may interleave them)"
        )

    def trace_step(self, prefix: Path) -> dict[str, str]:
        """JAX's device memory profile (pprof) right after one more step: the buffers alive
        between steps (parameters, optimizer state, what the step keeps); XLA frees a step's
        temporaries before it returns, so no profile can be taken inside a jitted step."""
        import jax

        self.session.step()
        path = prefix.with_name(prefix.name + ".device-memory.prof")
        jax.profiler.save_device_memory_profile(str(path))
        return {"JAX device memory profile after one step (pprof, live buffers)": path.name}

    def model_sizes(self) -> dict[str, float]:
        s = self.session
        out: dict[str, float] = {
            TRAINABLE_PARAMETERS: float(
                sum(int(a.size) for a in s.jax.tree_util.tree_leaves(s.params))
            ),
            # every resident copy (two-models-sequential holds none between steps)
            PARAMETER_BYTES: float(self._resident_parameter_bytes()),
        }
        if s.opt_state is not None:
            out[GRADIENT_BYTES] = out[PARAMETER_BYTES]  # one gradient per parameter
            out[OPTIMIZER_STATE_BYTES] = float(tree_bytes(s.opt_state))
        if s._compiled is not None:
            out.update(xla_static_metrics(s._compiled))
        return out

    def _resident_parameter_bytes(self) -> int:
        s = self.session
        if s.strategy.models == "two-sequential":
            return 0
        second = tree_bytes(s.second[0]) if s.second is not None else 0
        return tree_bytes(s.params) + second

    def framework_notes(self) -> dict[str, object]:
        s = self.session
        strategy, module = s.strategy, s.module
        compute, param = DTYPES[strategy.precision]
        notes: dict[str, object] = {
            "jit": "whole step AOT-compiled on the first step"
            + (
                "; params, batch_stats and optimizer state donated"
                if strategy.mode == "train"
                else ""
            ),
            "compute_dtype": compute,
            "param_dtype": param,
            "device_peak": "XLA peak_bytes_in_use covers the whole process (not resettable)",
        }
        if s.dynamic_scale is not None:
            notes["loss_scaling"] = s.how("precision")
        if strategy.checkpoint:
            notes["checkpoint"] = module.CHECKPOINT_UNIT
        if strategy.accumulate > 1 and strategy.accumulate_mode == "scan":
            notes["accumulate"] = s.how("accumulate_mode")
        if hasattr(module, "ATTENTION"):
            notes["attention"] = module.ATTENTION[strategy.attention]
        if strategy.attention == "fused":
            notes["attention_kernel"] = module.attention_implementation(
                compute, s.jax.default_backend()
            )
        notes["matmul"] = strategy.matmul
        notes["jax_default_matmul_precision"] = str(
            s.jax.config.jax_default_matmul_precision or "default"
        )
        if s.mesh is not None:
            notes["sharding"] = s.how("sharding")
            notes["mesh"] = f"{s.mesh.devices.size} devices: {list(s.mesh.devices.flat)}"
            notes["per_device_memory"] = (
                "model state from each device's shards; xla_* from memory_analysis() of the "
                "SPMD-partitioned step (per device); gradients assumed laid out as parameters"
            )
            if module.HAS_BATCHNORM:
                notes["batchnorm"] = "statistics over the global batch (XLA reduces across devices)"
        return notes

    def rank_metrics(self) -> list[dict[str, float]]:
        """Each device's shards of the model state and its live buffers, in Mesh order."""
        s = self.session
        if s.mesh is None:
            return []
        jax = s.jax
        params = jax_sharding.device_bytes(jax, s.params)
        stats = jax_sharding.device_bytes(jax, s.batch_stats)
        opt = jax_sharding.device_bytes(jax, s.opt_state)
        live = jax_sharding.live_bytes(jax)
        out = []
        for d in s.mesh.devices.flat:
            # a gradient per parameter, laid out as the parameter (XLA's temp holds them)
            row = {
                PARAMETER_BYTES: float(params.get(d, 0) + stats.get(d, 0)),
                GRADIENT_BYTES: float(params.get(d, 0)),
                OPTIMIZER_STATE_BYTES: float(opt.get(d, 0)),
                DEVICE_LIVE_BUFFER_BYTES: float(live.get(d, 0)),
            }
            row[MODEL_STATE_BYTES] = sum(row[k] for k in MODEL_STATE)
            stats_d = d.memory_stats() if d.platform == "gpu" else None
            if stats_d:
                row[PEAK_DEVICE_ALLOCATED_BYTES] = float(stats_d.get("peak_bytes_in_use", 0))
            out.append(row)
        return out


def xla_static_metrics(compiled: Any) -> dict[str, float]:
    """XLA's own view of the compiled step: buffer sizes and flops."""
    out: dict[str, float] = {}
    analysis = compiled.memory_analysis()
    if analysis is not None:
        for field in ["temp", "argument", "output", "alias", "generated_code"]:
            value = getattr(analysis, f"{field}_size_in_bytes", None)
            if value is not None:
                out[f"xla_{field}_bytes"] = float(value)
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older jax returned one dict per computation
        cost = cost[0] if cost else None
    if cost and "flops" in cost:
        out[XLA_FLOPS] = float(cost["flops"])
    return out
