"""The JAX session: parameters, statistics, optimizer state and batch on the device; the
step's primitives (the step itself is membench.backends.session's template), XLA's view of the
compiled step and the counters the worker reads."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from membench.backends import Session, micro_batches, model_module, model_options
from membench.backends.jax_backend import sharding as jax_sharding
from membench.backends.jax_backend.computation import JaxComputation
from membench.backends.jax_backend.support import SUPPORT
from membench.backends.session import MODEL_STATE  # a rank's model state between steps

# precision -> (compute dtype, parameter dtype)
_DTYPES = {
    "fp32": ("float32", "float32"),
    "amp-bf16": ("bfloat16", "float32"),
    "amp-fp16": ("float16", "float32"),
    "half": ("float16", "float16"),
}


def tree_bytes(tree: Any) -> int:
    import jax

    return sum(int(a.size) * a.dtype.itemsize for a in jax.tree_util.tree_leaves(tree))


class JaxSession(JaxComputation, Session):
    support = SUPPORT

    def build(self) -> None:
        import jax
        import jax.numpy as jnp
        import optax

        self.jax, self.jnp = jax, jnp
        spec, s = self.spec, self.strategy
        self.module = module = model_module(spec.workload, "jax")
        self.loss_fn = module.loss_fn
        compute, param = (getattr(jnp, d) for d in _DTYPES[s.precision])
        options = model_options(spec)
        self.model = module.build(
            spec.size.inputs, checkpoint=s.checkpoint, dtype=compute, param_dtype=param, **options
        )
        # Initialised in float32 whatever the strategy, then cast (as torch's model.half()
        # rounds the float32 weights): every strategy starts from the same weights.
        float32_model = module.build(spec.size.inputs, **options)
        variables = module.init_variables(float32_model, 1, spec.size.inputs, spec.seed)
        cast = lambda tree: jax.tree_util.tree_map(lambda a: a.astype(param), tree)  # noqa: E731
        self._cast = cast
        # batch_stats: BatchNorm's running statistics; {} for a model without BatchNorm
        self.params = cast(variables["params"])
        self.batch_stats = cast(variables.get("batch_stats", {}))
        inputs, labels = module.synthetic_batch(spec.batch_size, spec.size.inputs, spec.seed)
        # the suite's layout (channels first) -> the model's (channels last where it has any)
        inputs = module.input_layout(inputs)
        in_dtype = compute if np.issubdtype(inputs.dtype, np.floating) else jnp.int32
        # optax.MultiSteps: one jitted call per micro-batch (jax issue 12868 makes the in-graph
        # scan slow on XLA:CPU); the micro-batches are resident, split once, as in Jittor's.
        self.multi_steps = s.mode == "train" and s.accumulate > 1 and s.accumulate_mode == "loop"
        calls = s.accumulate if self.multi_steps else 1
        self.batches = [
            (jax.device_put(jnp.asarray(x, in_dtype)), jax.device_put(jnp.asarray(y, jnp.int32)))
            for x, y in micro_batches(inputs, labels, calls)
        ]
        self.dynamic_scale = None
        self.opt_state = None
        if s.mode == "train":
            self.tx = module.make_optimizer()
            if self.multi_steps:  # gradients averaged in the optimizer state, k-th call updates
                self.tx = optax.MultiSteps(self.tx, every_k_schedule=s.accumulate)
            self.opt_state = self.tx.init(self.params)
            if s.precision == "amp-fp16":
                from flax.training.dynamic_scale import DynamicScale

                self.dynamic_scale = DynamicScale()
        self._compiled = None  # AOT-compiled on the first step, so that step holds the compile
        self._by_length: dict[int, Any] = {}  # lengths: one executable per sequence length
        self._init: Callable[[int], dict] | None = None  # two models: the jitted init
        self.host_batch = None
        if self.host_data:  # numpy arrays as a data loader hands them over
            self.host_batch = [(np.asarray(x), np.asarray(y)) for x, y in self.batches]
        self.mesh = None
        if spec.world_size > 1:
            self._shard()

    # -- sharded data parallelism (membench.backends.jax_backend.sharding) ------------------
    def _shard(self) -> None:
        """Batch, parameters, statistics and optimizer state placed on the Mesh."""
        jax = self.jax
        self.mesh = m = jax_sharding.mesh(jax, self.spec.world_size)
        shard = self.strategy.sharding == "zero3"
        state = (self.params, self.batch_stats, self.opt_state)
        self._state_shardings = tuple(jax_sharding.shardings(jax, t, m, shard) for t in state)
        self.params, self.batch_stats, self.opt_state = (
            jax.device_put(t, sh) for t, sh in zip(state, self._state_shardings, strict=True)
        )
        self.batches = [
            tuple(jax.device_put(a, jax_sharding.batch_sharding(jax, m, a.ndim)) for a in xy)
            for xy in self.batches
        ]

    def _step_function(self) -> Callable:
        """The train step jit compiles: held to the state's layout on a Mesh."""
        if self.mesh is None:
            return self._train_step
        return jax_sharding.constrained(self.jax, self._train_step, *self._state_shardings)

    def rank_metrics(self) -> list[dict[str, float]]:
        """Each device's shards of the model state and its live buffers, in Mesh order."""
        if self.mesh is None:
            return []
        jax = self.jax
        params = jax_sharding.device_bytes(jax, self.params)
        stats = jax_sharding.device_bytes(jax, self.batch_stats)
        opt = jax_sharding.device_bytes(jax, self.opt_state)
        live = jax_sharding.live_bytes(jax)
        out = []
        for d in self.mesh.devices.flat:
            # a gradient per parameter, laid out as the parameter (XLA's temp holds them)
            row = {
                "parameter_bytes": float(params.get(d, 0) + stats.get(d, 0)),
                "gradient_bytes": float(params.get(d, 0)),
                "optimizer_state_bytes": float(opt.get(d, 0)),
                "device_live_buffer_bytes": float(live.get(d, 0)),
            }
            row["model_state_bytes"] = sum(row[k] for k in MODEL_STATE)
            stats_d = d.memory_stats() if d.platform == "gpu" else None
            if stats_d:
                row["peak_device_allocated_bytes"] = float(stats_d.get("peak_bytes_in_use", 0))
            out.append(row)
        return out

    # -- the two-model strategies: a model is its (params, batch_stats) ------------------------
    def drop_model(self) -> None:
        """Two models in turn: nothing resident between steps, the parameters kept as shapes
        only (what the first step's compile needs)."""
        jax = self.jax
        shapes = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype)  # noqa: E731
        self.params, self.batch_stats = jax.tree_util.tree_map(
            shapes, (self.params, self.batch_stats)
        )
        gc.collect()

    def inference_model(self, seed: int) -> tuple[Any, Any]:
        """(params, batch_stats) of an independently initialised copy of the model, from one
        jitted init taking the seed as an argument: compiled once, as a JAX user writes it
        (init_variables alone would retrace and recompile on every call)."""
        if self._init is None:
            inputs, module = self.spec.size.inputs, self.module
            model = module.build(inputs, **model_options(self.spec))
            self._init = self.jax.jit(lambda key: module.init_variables(model, 1, inputs, key))
        variables = self._init(seed)
        params = self._cast(variables["params"])
        batch_stats = self._cast(variables.get("batch_stats", {}))
        return params, batch_stats

    # -- the step's primitives (Session.step is the template) ----------------------------
    def drop_batch(self) -> None:
        self.batches = []

    def copy_batch(self) -> None:
        batches = [tuple(self.jax.device_put(a) for a in xy) for xy in self.host_batch]
        self.jax.block_until_ready(batches)
        self.batches = batches

    def prepare_step(self) -> None:
        if self._compiled is None:  # the first step holds the compile
            self._compiled = self._compile()

    def infer_with(self, model: tuple[Any, Any]) -> None:
        x = self.batches[0][0]  # inference holds the batch whole
        self._compiled(*model, x).block_until_ready()

    def release(self) -> None:
        gc.collect()  # JAX has no user call that releases its allocator's pool

    def sequence_length(self) -> int:
        return self.batches[0][0].shape[1]

    def infer_length(self, length: int) -> None:
        jax, tokens = self.jax, self.batches[0][0]
        if length not in self._by_length:  # jit retraces per shape: one executable per length
            fn = jax.jit(self._infer_step)
            shape = jax.ShapeDtypeStruct((tokens.shape[0], length), tokens.dtype)
            self._by_length[length] = fn.lower(self.params, self.batch_stats, shape).compile()
        run = self._by_length[length]
        run(self.params, self.batch_stats, tokens[:, :length]).block_until_ready()

    @property
    def x(self) -> Any:
        """The whole input batch (for tests; concatenated where it is held as micro-batches)."""
        return self.jnp.concatenate([x for x, _ in self.batches])

    @property
    def y(self) -> Any:
        return self.jnp.concatenate([y for _, y in self.batches])

    # -- Session -------------------------------------------------------------------------
    def trace_step(self, prefix: Path) -> dict[str, str]:
        """JAX's device memory profile (pprof) right after one more step: the buffers alive
        between steps (parameters, optimizer state, what the step keeps); XLA frees a step's
        temporaries before it returns, so no profile can be taken inside a jitted step."""
        import jax

        self.step()
        path = prefix.with_name(prefix.name + ".device-memory.prof")
        jax.profiler.save_device_memory_profile(str(path))
        return {"JAX device memory profile after one step (pprof, live buffers)": path.name}

    def marked_step_phases(self) -> str:
        return (
            "the step as one phase: one jitted function (XLA compiles forward, backward and "
            "update together and may interleave them)"
        )

    def infer(self) -> None:
        x = self.batches[0][0]
        self._compiled(self.params, self.batch_stats, x).block_until_ready()
        if self.second is not None:
            self._compiled(*self.second, x).block_until_ready()

    def train_step(self) -> None:
        self._run_train_step(self._compiled)

    def update(self, train_bn: bool = True) -> Any:
        """The parameter change of one step (for tests); train_bn=False runs BatchNorm on its
        running averages."""
        jax = self.jax
        before = jax.tree_util.tree_map(lambda a: a.copy(), self.params)  # the step donates
        self._run_train_step(self._jitted_train_step(), train_bn=train_bn)
        return jax.tree_util.tree_map(self.jnp.subtract, self.params, before)

    def gradients(self, train_bn: bool = True) -> dict[str, np.ndarray]:
        """Session.gradients, the parameter tree's paths joined by "/"."""
        flat = self.jax.tree_util.tree_flatten_with_path(self._gradient_tree(train_bn))[0]
        return {
            "/".join(str(getattr(k, "key", k)) for k in path): np.asarray(g, np.float64)
            for path, g in flat
        }

    def logits(self) -> np.ndarray:
        out = self.jax.jit(self._infer_step)(self.params, self.batch_stats, self.x)
        return np.asarray(out, np.float32)

    def memory(self) -> dict[str, float]:
        device = self.jax.devices()[0]
        stats = device.memory_stats() if device.platform == "gpu" else None
        if not stats:
            return {}  # XLA:CPU keeps no allocator statistics
        # XLA's peak cannot be reset: it is the whole process's, first step included.
        return {"peak_device_allocated_bytes": float(stats.get("peak_bytes_in_use", 0))}

    def model_sizes(self) -> dict[str, float]:
        out: dict[str, float] = {
            "trainable_parameters": float(
                sum(int(a.size) for a in self.jax.tree_util.tree_leaves(self.params))
            ),
            # every resident copy (two-models-sequential holds none between steps)
            "parameter_bytes": float(self._resident_parameter_bytes()),
        }
        if self.opt_state is not None:
            out["gradient_bytes"] = out["parameter_bytes"]  # one gradient per parameter
            out["optimizer_state_bytes"] = float(tree_bytes(self.opt_state))
        if self._compiled is not None:
            out.update(xla_static_metrics(self._compiled))
        return out

    def _resident_parameter_bytes(self) -> int:
        if self.strategy.models == "two-sequential":
            return 0
        second = tree_bytes(self.second[0]) if self.second is not None else 0
        return tree_bytes(self.params) + second

    def framework_notes(self) -> dict[str, object]:
        s = self.strategy
        compute, param = _DTYPES[s.precision]
        notes: dict[str, object] = {
            "jit": "whole step AOT-compiled on the first step"
            + ("; params, batch_stats and optimizer state donated" if s.mode == "train" else ""),
            "compute_dtype": compute,
            "param_dtype": param,
            "device_peak": "XLA peak_bytes_in_use covers the whole process (not resettable)",
        }
        if self.dynamic_scale is not None:
            notes["loss_scaling"] = self.how("precision")
        if s.checkpoint:
            notes["checkpoint"] = self.module.CHECKPOINT_UNIT
        if s.accumulate > 1 and s.accumulate_mode == "scan":
            notes["accumulate"] = self.how("accumulate_mode")
        if hasattr(self.module, "ATTENTION"):
            notes["attention"] = self.module.ATTENTION[s.attention]
        if s.attention == "fused":
            notes["attention_kernel"] = self.module.attention_implementation(
                compute, self.jax.default_backend()
            )
        notes["matmul"] = s.matmul
        notes["jax_default_matmul_precision"] = str(
            self.jax.config.jax_default_matmul_precision or "default"
        )
        if self.mesh is not None:
            notes["sharding"] = self.how("sharding")
            notes["mesh"] = f"{self.mesh.devices.size} devices: {list(self.mesh.devices.flat)}"
            notes["per_device_memory"] = (
                "model state from each device's shards; xla_* from memory_analysis() of the "
                "SPMD-partitioned step (per device); gradients assumed laid out as parameters"
            )
            if self.module.HAS_BATCHNORM:
                notes["batchnorm"] = "statistics over the global batch (XLA reduces across devices)"
        return notes


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
        out["xla_flops"] = float(cost["flops"])
    return out
