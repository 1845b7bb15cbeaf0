"""The JAX session: parameters, statistics, optimizer state and batch on the device, and the
step's primitives (the step itself is membench.backends.session's template; the functions XLA
compiles are computation.py's; what the worker reads is readings.py)."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np

from membench.backends import Session, micro_batches, model_module, model_options
from membench.backends.jax_backend import sharding as jax_sharding
from membench.backends.jax_backend.computation import JaxComputation
from membench.backends.jax_backend.readings import JaxReadings
from membench.backends.jax_backend.support import DTYPES, SUPPORT


class JaxSession(Session):
    support = SUPPORT
    readings_class = JaxReadings

    def build(self) -> None:
        import jax
        import jax.numpy as jnp
        import optax

        self.jax, self.jnp = jax, jnp
        spec, s = self.spec, self.strategy
        self.module = module = model_module(spec.workload, "jax")
        compute, param = (getattr(jnp, d) for d in DTYPES[s.precision])
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
        tx = None
        if s.mode == "train":
            tx = module.make_optimizer()
            if self.multi_steps:  # gradients averaged in the optimizer state, k-th call updates
                tx = optax.MultiSteps(tx, every_k_schedule=s.accumulate)
            self.opt_state = tx.init(self.params)
            if s.precision == "amp-fp16":
                from flax.training.dynamic_scale import DynamicScale

                self.dynamic_scale = DynamicScale()
        self._compiled = None  # AOT-compiled on the first step, so that step holds the compile
        self._by_length: dict[int, Any] = {}  # lengths: one executable per sequence length
        self._init: Any = None  # two models: the jitted init
        self.host_batch = None
        if self.host_data:  # numpy arrays as a data loader hands them over
            self.host_batch = [(np.asarray(x), np.asarray(y)) for x, y in self.batches]
        self.mesh = None
        shardings = None
        if spec.world_size > 1:  # placed on a Mesh (membench.backends.jax_backend.sharding)
            shardings = place_on_mesh(self)
        scan = s.accumulate if s.accumulate_mode == "scan" else 1
        self.computation = JaxComputation(self.model, module.loss_fn, tx, scan, shardings)

    # -- the two-model strategies: a model is its (params, batch_stats) ------------------------
    def new_model(self, seed: int) -> tuple[Any, Any]:
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

    def drop_model(self) -> None:
        """Two models in turn: nothing resident between steps, the parameters kept as shapes
        only (what the first step's compile needs)."""
        jax = self.jax
        shapes = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype)  # noqa: E731
        self.params, self.batch_stats = jax.tree_util.tree_map(
            shapes, (self.params, self.batch_stats)
        )
        gc.collect()

    # -- the step's primitives (Session.step is the template) ----------------------------
    def copy_batch(self) -> list[Any]:
        batches = [tuple(self.jax.device_put(a) for a in xy) for xy in self.host_batch]
        self.jax.block_until_ready(batches)
        return batches

    def prepare_step(self) -> None:
        if self._compiled is None:  # the first step holds the compile
            c, (x, y) = self.computation, self.batches[0]  # one compile serves every micro-batch
            if self.strategy.mode == "infer":
                self._compiled = c.compile_infer(self.params, self.batch_stats, x)
            else:
                state = (self.params, self.batch_stats, self.opt_state, self.dynamic_scale)
                self._compiled = c.compile_train(*state, x, y)

    def infer(self, model: Any = None, length: int | None = None) -> None:
        params, batch_stats = (self.params, self.batch_stats) if model is None else model
        x = self.batches[0][0]  # inference holds the batch whole
        if length is None:
            self._compiled(params, batch_stats, x).block_until_ready()
            return
        if length not in self._by_length:  # jit retraces per shape: one executable per length
            shape = self.jax.ShapeDtypeStruct((x.shape[0], length), x.dtype)
            self._by_length[length] = self.computation.compile_infer(params, batch_stats, shape)
        self._by_length[length](params, batch_stats, x[:, :length]).block_until_ready()

    def train_step(self) -> None:
        run_train_step(self, self._compiled)

    def release(self) -> None:
        gc.collect()  # JAX has no user call that releases its allocator's pool


def place_on_mesh(s: JaxSession) -> tuple[Any, Any, Any]:
    """Batch, parameters, statistics and optimizer state placed on the Mesh (build's, where
    the cell has several devices); the state's shardings returned (the step is held to them)."""
    jax = s.jax
    s.mesh = m = jax_sharding.mesh(jax, s.spec.world_size)
    shard = s.strategy.sharding == "zero3"
    state = (s.params, s.batch_stats, s.opt_state)
    shardings = tuple(jax_sharding.shardings(jax, t, m, shard) for t in state)
    s.params, s.batch_stats, s.opt_state = (
        jax.device_put(t, sh) for t, sh in zip(state, shardings, strict=True)
    )
    s.batches = [
        tuple(jax.device_put(a, jax_sharding.batch_sharding(jax, m, a.ndim)) for a in xy)
        for xy in s.batches
    ]
    return shardings


def run_train_step(s: JaxSession, fn: Any, **static: object) -> None:
    """fn (the compiled train step, or a test's jitted one) over each micro-batch, dispatched
    asynchronously, each call's state donated to the next; synchronised once at the end."""
    state = None
    for x, y in s.batches:
        state = fn(s.params, s.batch_stats, s.opt_state, s.dynamic_scale, x, y, **static)
        s.params, s.batch_stats, s.opt_state, s.dynamic_scale, _ = state
    s.jax.block_until_ready(state)
