"""JAX/Flax backend. jax is imported inside methods, after the worker has set the env.

Used the way JAX's own experts use it: the whole train step is one jitted function with
parameters, BatchNorm statistics and optimizer state donated; gradient accumulation is
optax.MultiSteps, one jitted micro-step per call (the in-graph lax.scan is its own strategy);
mixed precision is the model's compute dtype over float32 parameters, with dynamic loss
scaling for float16.
"""

from __future__ import annotations

import gc
import importlib
import os
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from membench.backends import (
    ANY,
    TF32_ELSEWHERE,
    Backend,
    BuildSpec,
    Implemented,
    Session,
    Support,
    Unsupported,
    device_budget_fraction,
    jax_sharding,
    micro_batches,
    model_options,
    tf32_override,
)
from membench.backends.phases import (
    COLLECTOR,
    TRANSFER,
    PhaseClock,
    hygiene_due,
    lengths_for_step,
    model_seeds,
)
from membench.registry import Strategy, workload

# precision -> (compute dtype, parameter dtype)
_DTYPES = {
    "fp32": ("float32", "float32"),
    "amp-bf16": ("bfloat16", "float32"),
    "amp-fp16": ("float16", "float32"),
    "half": ("float16", "float16"),
}


# XLA's allocator limit is total memory x this fraction, preallocated or not (default 0.75:
# JAX would run out ~20 GiB before torch on an 80 GB card). Not 1.0: the CUDA context and the
# cuBLAS/cuDNN workspaces live outside XLA's pool.
MEM_FRACTION = 0.95
# jaxlib's xla_client.generate_pjrt_gpu_plugin_options reads XLA_CLIENT_MEM_FRACTION, and the
# older name as a deprecated alias; both set is a ValueError, and the plugin does not start.
FRACTION_VARIABLES = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
# jax_default_matmul_precision per policy: XLA's default on GPUs is TF32 for float32 dots and
# convolutions (jax/_src/config.py; jax issue 18934); "highest" is float32 in full.
MATMUL_PRECISION = {"fp32": "highest", "tf32": "tensorfloat32"}
# A rank's model state: what it holds between steps
MODEL_STATE = ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes")
# Out-of-memory as XLA reports it (a JaxRuntimeError with the status name)
OOM_MARKERS = ("RESOURCE_EXHAUSTED", "Out of memory")


def fraction_variable(environ: Mapping[str, str] = os.environ) -> str:
    """The variable that carries the fraction: the spelling already set, else the current one."""
    return next((v for v in FRACTION_VARIABLES if v in environ), FRACTION_VARIABLES[0])


def model_module(workload_name: str) -> Any:
    modules = workload(workload_name).model_modules
    if "jax" not in modules:
        raise Unsupported(f"workload {workload_name} has no Flax model")
    return importlib.import_module(modules["jax"])


def tree_bytes(tree: Any) -> int:
    import jax

    return sum(int(a.size) * a.dtype.itemsize for a in jax.tree_util.tree_leaves(tree))


class JaxSession(Session):
    def __init__(self, spec: BuildSpec):
        import jax
        import jax.numpy as jnp
        import optax

        self.jax, self.jnp = jax, jnp
        self.spec = spec
        self.strategy = s = spec.strategy
        self.module = module = model_module(spec.workload)
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
        self._advice_setup(inputs, labels)
        self.mesh = None
        if spec.world_size > 1:
            self._shard()

    # -- sharded data parallelism (membench.backends.jax_sharding) ---------------------------
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

    # -- the advice strategies: two models, host data, hygiene, lengths -------------------------
    def _advice_setup(self, inputs: np.ndarray, labels: np.ndarray) -> None:
        s, jax = self.strategy, self.jax
        self.phases = PhaseClock()
        self.steps = 0
        self.on_phase: Callable[[str], None] | None = None  # tests watch the two-model phases
        self._built: list[weakref.ref] = []  # every parameter array built, to count the alive
        self._track(self.params, self.batch_stats)
        self.one_model_bytes = tree_bytes((self.params, self.batch_stats))
        self._by_length: dict[int, Any] = {}  # lengths: one executable per sequence length
        self._init: Callable[[int], dict] | None = None  # two models: the jitted init
        self.second = None
        if s.models == "two-resident":
            self.second = self.inference_variables(model_seeds(self.spec.seed)[1])
        elif s.models == "two-sequential":  # nothing resident between steps: shapes only
            shapes = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype)  # noqa: E731
            self.params, self.batch_stats = jax.tree_util.tree_map(
                shapes, (self.params, self.batch_stats)
            )
            gc.collect()
        self.host_batch = None
        if s.data == "host":  # numpy arrays as a data loader hands them over
            self.host_batch = [(np.asarray(x), np.asarray(y)) for x, y in self.batches]

    def inference_variables(self, seed: int) -> tuple[Any, Any]:
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
        self._track(params, batch_stats)
        return params, batch_stats

    def _track(self, *trees: Any) -> None:
        self._built += [weakref.ref(a) for a in self.jax.tree_util.tree_leaves(trees)]

    def alive_parameter_bytes(self) -> int:
        """Bytes of every parameter and statistic array built here that is still alive."""
        alive = [a for r in self._built if (a := r()) is not None and not a.is_deleted()]
        return sum(int(a.size) * a.dtype.itemsize for a in alive)

    def _phase(self, name: str) -> None:
        if self.on_phase is not None:
            self.on_phase(name)

    def _transfer(self) -> None:
        self.batches = []  # the previous copy dropped, as rebinding a loop variable does
        with self.phases.timed(TRANSFER):
            batches = [tuple(self.jax.device_put(a) for a in xy) for xy in self.host_batch]
            self.jax.block_until_ready(batches)
        self.batches = batches

    def _infer_sequential(self) -> None:
        x = self.batches[0][0]  # inference holds the batch whole
        for i, seed in enumerate(model_seeds(self.spec.seed)):
            params, batch_stats = self.inference_variables(seed)
            self._phase(f"built model {i}")
            self._compiled(params, batch_stats, x).block_until_ready()
            del params, batch_stats
            gc.collect()  # JAX has no user call that releases its allocator's pool
            self._phase(f"freed model {i}")

    def _infer_lengths(self) -> None:
        jax, tokens = self.jax, self.batches[0][0]
        for n in lengths_for_step(self.steps, tokens.shape[1], self.spec.seed):
            if n not in self._by_length:  # jit retraces per shape: one executable per length
                fn = jax.jit(self._infer_step)
                shape = jax.ShapeDtypeStruct((tokens.shape[0], n), tokens.dtype)
                self._by_length[n] = fn.lower(self.params, self.batch_stats, shape).compile()
            self._by_length[n](self.params, self.batch_stats, tokens[:, :n]).block_until_ready()

    def step_phases(self) -> dict[str, float]:
        return dict(self.phases.last)

    @property
    def x(self) -> Any:
        """The whole input batch (for tests; concatenated where it is held as micro-batches)."""
        return self.jnp.concatenate([x for x, _ in self.batches])

    @property
    def y(self) -> Any:
        return self.jnp.concatenate([y for _, y in self.batches])

    # -- the computation -----------------------------------------------------------------
    def _loss(self, params, batch_stats, x, y, train_bn: bool):
        variables = {"params": params, "batch_stats": batch_stats}
        if not train_bn:
            return self.loss_fn(self.model.apply(variables, x, train=False), y), batch_stats
        logits, state = self.model.apply(variables, x, train=True, mutable=["batch_stats"])
        return self.loss_fn(logits, y), state.get("batch_stats", {})

    def _grads(self, params, batch_stats, x, y, train_bn: bool = True):
        """Mean loss, new BatchNorm statistics and gradients of the batch x (with the scan
        strategy: over its k micro-batches, in one lax.scan)."""
        jax, jnp = self.jax, self.jnp
        grad = jax.value_and_grad(self._loss, has_aux=True)
        k = self.strategy.accumulate if self.strategy.accumulate_mode == "scan" else 1
        if k == 1:
            (loss, stats), grads = grad(params, batch_stats, x, y, train_bn)
            return loss, stats, grads

        def micro(carry, xy):
            stats, total_grads, total_loss = carry
            (loss, stats), grads = grad(params, stats, *xy, train_bn)
            total_grads = jax.tree_util.tree_map(jnp.add, total_grads, grads)
            return (stats, total_grads, total_loss + loss), None

        xs = x.reshape((k, x.shape[0] // k) + x.shape[1:])
        ys = y.reshape((k, y.shape[0] // k) + y.shape[1:])
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        init = (batch_stats, zeros, jnp.zeros((), jnp.float32))
        (stats, grads, loss), _ = jax.lax.scan(micro, init, (xs, ys))
        # each micro-batch loss is a mean over b/k samples: dividing by k gives the batch mean
        return loss / k, stats, jax.tree_util.tree_map(lambda g: g / k, grads)

    def _train_step(self, params, batch_stats, opt_state, dynamic_scale, x, y, train_bn=True):
        """One optimizer update over x; with MultiSteps one micro-step (the k-th applies it)."""
        import optax

        jax, jnp = self.jax, self.jnp
        if dynamic_scale is None:
            loss, stats, grads = self._grads(params, batch_stats, x, y, train_bn)
            finite = None
        else:

            def scaled(p):
                return self._loss(p, batch_stats, x, y, train_bn)

            # with has_aux, DynamicScale returns (unscaled loss, aux) as its aux
            dynamic_scale, finite, (loss, stats), grads = dynamic_scale.value_and_grad(
                scaled, has_aux=True
            )(params)
        updates, new_opt_state = self.tx.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        if finite is not None:  # an overflowing step is skipped, as GradScaler does
            keep = lambda new, old: jnp.where(finite, new, old)  # noqa: E731
            new_params = jax.tree_util.tree_map(keep, new_params, params)
            new_opt_state = jax.tree_util.tree_map(keep, new_opt_state, opt_state)
        return new_params, stats, new_opt_state, dynamic_scale, loss

    def _infer_step(self, params, batch_stats, x):
        return self.model.apply({"params": params, "batch_stats": batch_stats}, x, train=False)

    def _jitted_train_step(self) -> Any:
        return self.jax.jit(
            self._step_function(), donate_argnums=(0, 1, 2, 3), static_argnames="train_bn"
        )

    def _compile(self):
        x, y = self.batches[0]  # every micro-batch has its shape: one compile serves them all
        if self.strategy.mode == "infer":
            return self.jax.jit(self._infer_step).lower(self.params, self.batch_stats, x).compile()
        args = (self.params, self.batch_stats, self.opt_state, self.dynamic_scale, x, y)
        return self._jitted_train_step().lower(*args).compile()

    def _run_train_step(self, fn: Any, **static: object) -> None:
        """One step: fn over each micro-batch (dispatched asynchronously, each call's state
        donated to the next), synchronised once at the end."""
        state = None
        for x, y in self.batches:
            state = fn(
                self.params, self.batch_stats, self.opt_state, self.dynamic_scale, x, y, **static
            )
            self.params, self.batch_stats, self.opt_state, self.dynamic_scale, _ = state
        self.jax.block_until_ready(state)

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

    def step(self) -> None:
        s = self.strategy
        self.phases.start_step()
        if self.host_batch is not None:
            self._transfer()
        self._run()
        self.steps += 1
        if hygiene_due(self.steps, s.hygiene_every):
            with self.phases.timed(COLLECTOR):
                gc.collect()  # jax.clear_caches() drops compiled executables: not per-step hygiene

    def _run(self) -> None:
        s = self.strategy
        if self._compiled is None:
            self._compiled = self._compile()
        if s.models == "two-sequential":
            self._infer_sequential()
        elif s.lengths == "varying":
            self._infer_lengths()
        elif s.mode == "infer":
            x = self.batches[0][0]
            self._compiled(self.params, self.batch_stats, x).block_until_ready()
            if self.second is not None:
                self._compiled(*self.second, x).block_until_ready()
        else:
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

    def _gradient_tree(self, train_bn: bool) -> Any:
        jax = self.jax
        if self.dynamic_scale is None:
            # the mean of the micro-batches' gradients where MultiSteps accumulates them
            fn = jax.jit(self._grads, static_argnames="train_bn")
            grads = [fn(self.params, self.batch_stats, x, y, train_bn=train_bn)[2]
                     for x, y in self.batches]  # fmt: skip
            return jax.tree_util.tree_map(lambda *g: sum(g) / len(g), *grads)
        scale = self.dynamic_scale
        for _ in range(32):  # lower the scale until the scaled gradients are finite

            def scaled(p):
                return self._loss(p, self.batch_stats, self.x, self.y, train_bn)

            scale, finite, _, grads = scale.value_and_grad(scaled, has_aux=True)(self.params)
            if bool(finite):
                self.dynamic_scale = scale
                return grads
        raise RuntimeError("gradients still overflow after 32 scale reductions")

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

    def static_metrics(self) -> dict[str, float]:
        out: dict[str, float] = {
            "trainable_parameters": float(
                sum(int(a.size) for a in self.jax.tree_util.tree_leaves(self.params))
            ),
            # every resident copy (two-models-sequential holds none between steps)
            "parameter_bytes": float(self._resident_parameter_bytes()),
        }
        floor = out["parameter_bytes"]
        if self.opt_state is not None:
            out["gradient_bytes"] = out["parameter_bytes"]  # one gradient per parameter
            out["optimizer_state_bytes"] = float(tree_bytes(self.opt_state))
            floor += out["gradient_bytes"] + out["optimizer_state_bytes"]
        out["analytic_floor_bytes"] = floor
        if self._compiled is not None:
            out.update(xla_static_metrics(self._compiled))
        return out

    def _resident_parameter_bytes(self) -> int:
        if self.strategy.models == "two-sequential":
            return 0
        second = tree_bytes(self.second[0]) if self.second is not None else 0
        return tree_bytes(self.params) + second

    def notes(self) -> dict[str, object]:
        s = self.strategy
        compute, param = _DTYPES[s.precision]
        notes: dict[str, object] = {
            "mode": s.mode,
            "jit": "whole step AOT-compiled on the first step"
            + ("; params, batch_stats and optimizer state donated" if s.mode == "train" else ""),
            "compute_dtype": compute,
            "param_dtype": param,
            "device_peak": "XLA peak_bytes_in_use covers the whole process (not resettable)",
        }
        if self.dynamic_scale is not None:
            notes["loss_scaling"] = "flax DynamicScale; overflowing steps are skipped"
        if s.checkpoint:
            notes["checkpoint"] = self.module.CHECKPOINT_UNIT
        if self.multi_steps:
            notes["accumulate"] = (
                f"optax.MultiSteps(every_k_schedule={s.accumulate}): one jitted micro-step per "
                "call, state donated, gradients averaged in the optimizer state, the last call "
                "applies the update; a step is the k calls, synchronised once"
            )
            notes["xla_metrics"] = "memory_analysis() of the compiled micro-step (one compile)"
        elif s.accumulate > 1:
            notes["accumulate"] = (
                "lax.scan over micro-batches inside the jitted step (XLA:CPU runs "
                "convolutions in loop bodies far slower: jax issue 12868)"
            )
        if s.accumulate > 1:
            notes["micro_batch"] = self.spec.batch_size // s.accumulate
            if self.module.HAS_BATCHNORM:
                notes["batchnorm"] = "train-mode statistics over each micro-batch"
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
        notes.update(advice_notes(s))
        if self.mesh is not None:
            notes["sharding"] = jax_sharding.SUPPORT[s.sharding].how
            notes["mesh"] = f"{self.mesh.devices.size} devices: {list(self.mesh.devices.flat)}"
            notes["per_device_memory"] = (
                "model state from each device's shards; xla_* from memory_analysis() of the "
                "SPMD-partitioned step (per device); gradients assumed laid out as parameters"
            )
            if self.module.HAS_BATCHNORM:
                notes["batchnorm"] = "statistics over the global batch (XLA reduces across devices)"
        return notes


def advice_notes(s: Strategy) -> dict[str, object]:
    notes: dict[str, object] = {}
    if s.models == "two-resident":
        notes["models"] = "two parameter trees (seeds 0 and 101), one compiled forward run on each"
    if s.models == "two-sequential":
        notes["models"] = (
            "each step initialises model 0 (jitted init), runs it, deletes it and gc.collect(), "
            "then model 1; JAX has no user call that returns its allocator's pool"
        )
    if s.data == "host":
        notes["data"] = "numpy batch, jax.device_put + block_until_ready each step, timed apart"
    if s.hygiene_every:
        notes["hygiene"] = (
            f"gc.collect() every {s.hygiene_every} steps; jax.clear_caches() is not called (it "
            "drops compiled executables, which the next step would recompile)"
        )
    if s.lengths == "varying":
        notes["lengths"] = (
            "x[:, :n], one AOT-compiled forward per length (jit specialises on shapes); the "
            "first step compiles and runs each length once"
        )
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


def _not_xla(setting: str) -> str:
    return f"{setting}; XLA's allocator is chosen with XLA_PYTHON_CLIENT_ALLOCATOR"


class JaxBackend(Backend):
    name = "jax"
    baseline = (
        "the whole step as one jax.jit function (optax), parameters, BatchNorm statistics and "
        "optimizer state donated; on GPUs float32 in full (jax_default_matmul_precision=highest, "
        "NVIDIA_TF32_OVERRIDE=0)"
    )
    support: Support = {
        "precision": {
            "amp-bf16": Implemented("the model's compute dtype=bfloat16 over float32 parameters"),
            "amp-fp16": Implemented(
                "compute dtype=float16 over float32 parameters, Flax DynamicScale (overflowing "
                "steps skipped)"
            ),
            "half": Implemented("parameters, statistics and input cast to float16"),
        },
        "checkpoint": {True: Implemented("nn.remat on each block")},
        "accumulate": {
            ANY: Implemented(
                "k micro-batches, one optimizer update per step (loop mode: optax.MultiSteps, "
                "one jitted, donated micro-step per call, the k-th applies the update; xla_* "
                "metrics are the compiled micro-step's)"
            )
        },
        "accumulate_mode": {
            "scan": Implemented(
                "scan mode instead: lax.scan over the micro-batches inside one jitted step "
                "(slow on XLA:CPU: jax issue 12868)"
            ),
            "sync": "each micro-step is a jitted call whose state is donated to the next: the "
            "calls run in order and XLA frees a call's buffers as it ends, so blocking after "
            "each only adds waiting",
        },
        "mode": {
            "infer": Implemented("jitted forward with BatchNorm running averages, no autodiff")
        },
        "compile": {
            True: "JAX always runs the step compiled (jax.jit): the baseline is the compiled "
            "run, so this strategy would measure it twice under another name"
        },
        "allocator": {
            "expandable-segments": _not_xla("expandable_segments is a PyTorch CUDA setting"),
            "cuda-managed": _not_xla("use_cuda_managed_allocator is a Jittor setting"),
            "host-swap": _not_xla("JT_SAVE_MEM is a Jittor setting"),
        },
        "fusion": {
            False: "XLA fuses as part of compiling the step; no user setting turns fusion off "
            "(only debugging flags that drop individual compiler passes)"
        },
        "attention": {
            "fused": Implemented(
                "jax.nn.dot_product_attention(is_causal=True): implementation='cudnn' (fused) "
                "for float16/bfloat16 on GPUs; in float32 or on CPUs 'xla', XLA's ordinary "
                "attention (the record says attention_kernel: xla)"
            )
        },
        "matmul": {
            "tf32": Implemented(
                "jax_default_matmul_precision=tensorfloat32", ("cuda",), TF32_ELSEWHERE
            )
        },
        "eval_autograd": {
            True: "a JAX forward outside a transformation records no tape, so there is no "
            "no_grad to forget; a graph is kept only by jax.vjp's pullback, a deliberate call "
            "for gradients that JAX inference code does not make"
        },
        "models": {
            "two-resident": Implemented("two parameter trees, one compiled forward run on each"),
            "two-sequential": Implemented(
                "init, run, del + gc.collect() per model in turn (no pool release in JAX)"
            ),
        },
        "data": {
            "host": Implemented("numpy batch, jax.device_put + block_until_ready, timed apart")
        },
        "hygiene_every": {
            ANY: Implemented("gc.collect() every k steps (jax.clear_caches() is no memory call)")
        },
        "lengths": {"varying": Implemented("x[:, :n], one compiled forward per length")},
        "sharding": jax_sharding.SUPPORT,
    }
    one_process_drives_ranks = True  # one controller drives every device of the Mesh

    def world_env_vars(self, world_size: int, device: str) -> dict[str, str]:
        # on CPUs the Mesh's devices are XLA host devices, made at import
        return jax_sharding.host_devices_env(world_size) if device == "cpu" else {}

    def combination_refusal(self, spec: BuildSpec, device: str) -> str | None:
        s = spec.strategy
        if s.accumulate > 1 and s.precision == "amp-fp16":
            # GradScaler skips the whole step on an overflow in any micro-batch; Flax's
            # DynamicScale decides per call, and MultiSteps would fold the overflow in.
            return (
                "loss scaling across accumulated micro-batches is not implemented (an overflow "
                "in one micro-batch must skip the whole step)"
            )
        if s.sharding != "none" and (
            s.accumulate > 1 or s.precision == "amp-fp16" or s.data != "device"
        ):
            return (
                "sharding with gradient accumulation, loss scaling or a host batch is not "
                "implemented"
            )
        return None

    def env_vars(self, strategy: Strategy, device: str) -> dict[str, str]:
        # Without this JAX takes 75% of GPU memory at start and every peak reads the same.
        env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        if device == "cuda":
            # A CUDA plugin that fails to start would otherwise only warn, and JAX would run on
            # the CPU under a GPU preset; with this it raises, and the device guard says why.
            env["JAX_PLATFORMS"] = "cuda"
            # the allocator's limit, preallocated or not: a capacity budget, else MEM_FRACTION
            fraction = device_budget_fraction() or MEM_FRACTION
            env[fraction_variable()] = f"{fraction:.4f}"
            env["JAX_DEFAULT_MATMUL_PRECISION"] = MATMUL_PRECISION[strategy.matmul]
            env.update(tf32_override(strategy, device))
        return env

    def environment(self) -> dict[str, object]:
        import jax

        device = jax.devices()[0]
        env: dict[str, object] = {
            "framework": "jax",
            "framework_version": jax.__version__,
            "device": "cuda" if device.platform == "gpu" else device.platform,
            "device_name": device.device_kind,
            "jax_backend": jax.default_backend(),
            "xla_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true"),
        }
        if device.platform == "gpu":
            variable = fraction_variable()
            env["xla_mem_fraction"] = float(os.environ.get(variable, 0.75))  # 0.75: XLA's own
            env["xla_mem_fraction_variable"] = variable
            # the limit XLA's allocator enforces: what JAX may use of the card
            env["xla_bytes_limit"] = int((device.memory_stats() or {}).get("bytes_limit", 0))
        return env

    def create_session(self, spec: BuildSpec) -> JaxSession:
        return JaxSession(spec)

    def is_oom(self, exc: BaseException) -> bool:
        text = str(exc)
        return isinstance(exc, MemoryError) or any(m in text for m in OOM_MARKERS)
