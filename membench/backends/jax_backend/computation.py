"""The functions JAX compiles for a cell: the loss, the gradients (over micro-batches in one
lax.scan for the scan mode), the train step with its optimizer update and loss scaling, the
inference forward, and their ahead-of-time compile.

A computation is made from what it computes with (the model, its loss, the optimizer, the
micro-batches a scan sums, the state's layout on a Mesh) and holds no state: the session
passes parameters, statistics, optimizer state and batch in, and keeps what comes out.
"""

from __future__ import annotations

from typing import Any

from membench.backends.jax_backend import sharding


class JaxComputation:
    """The pure functions a JAX session jits, and their compile."""

    def __init__(
        self,
        model: Any,
        loss_fn: Any,
        tx: Any = None,
        scan: int = 1,
        state_shardings: tuple[Any, Any, Any] | None = None,
    ) -> None:
        """tx: the optax optimizer (None: inference); scan: the micro-batches one lax.scan
        sums (1: none); state_shardings: the (params, batch_stats, opt_state) layout a Mesh
        step is held to (None: one device)."""
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        self.model, self.loss_fn, self.tx = model, loss_fn, tx
        self.scan = scan
        self.state_shardings = state_shardings

    def loss(self, params, batch_stats, x, y, train_bn: bool):
        variables = {"params": params, "batch_stats": batch_stats}
        if not train_bn:
            return self.loss_fn(self.model.apply(variables, x, train=False), y), batch_stats
        logits, state = self.model.apply(variables, x, train=True, mutable=["batch_stats"])
        return self.loss_fn(logits, y), state.get("batch_stats", {})

    def grads(self, params, batch_stats, x, y, train_bn: bool = True):
        """Mean loss, new BatchNorm statistics and gradients of the batch x (with the scan
        strategy: over its k micro-batches, in one lax.scan)."""
        jax, jnp = self.jax, self.jnp
        grad = jax.value_and_grad(self.loss, has_aux=True)
        k = self.scan
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

    def train_step(self, params, batch_stats, opt_state, dynamic_scale, x, y, train_bn=True):
        """One optimizer update over x; with MultiSteps one micro-step (the k-th applies it)."""
        import optax

        jax, jnp = self.jax, self.jnp
        if dynamic_scale is None:
            loss, stats, grads = self.grads(params, batch_stats, x, y, train_bn)
            finite = None
        else:

            def scaled(p):
                return self.loss(p, batch_stats, x, y, train_bn)

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

    def infer_step(self, params, batch_stats, x):
        return self.model.apply({"params": params, "batch_stats": batch_stats}, x, train=False)

    def jitted_train_step(self) -> Any:
        """The train step jitted, its state donated; held to the state's layout on a Mesh."""
        fn = self.train_step
        if self.state_shardings is not None:
            fn = sharding.constrained(self.jax, fn, *self.state_shardings)
        return self.jax.jit(fn, donate_argnums=(0, 1, 2, 3), static_argnames="train_bn")

    def compile_infer(self, params, batch_stats, x) -> Any:
        """The inference forward AOT-compiled for these arguments' shapes."""
        return self.jax.jit(self.infer_step).lower(params, batch_stats, x).compile()

    def compile_train(self, params, batch_stats, opt_state, dynamic_scale, x, y) -> Any:
        """The train step AOT-compiled for these arguments' shapes."""
        args = (params, batch_stats, opt_state, dynamic_scale, x, y)
        return self.jitted_train_step().lower(*args).compile()
