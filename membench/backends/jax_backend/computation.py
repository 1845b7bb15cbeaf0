"""The functions JAX compiles for a JAX session: the loss, the gradients (over micro-batches
in one lax.scan for the scan mode), the train step with its optimizer update and loss scaling,
the inference forward, and their ahead-of-time compile."""

from __future__ import annotations

from typing import Any


class JaxComputation:
    """What JaxSession jits; it reads the session's model, loss, optimizer and strategy."""

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
