"""JAX/Flax's plain loop: a jitted train step with its state donated; accumulation with
optax.MultiSteps, one call per micro-batch; inference a jitted apply. amp-bf16: the module's
compute dtype bfloat16 and the batch in bfloat16, its parameters float32 (Flax's own way).
Flax's convolutions take NHWC already: no channels-last loop. block_until_ready ends each
step, so the timer sees the work."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax

from models.reference.common import only, parse, split, time_steps


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    only(args, ("fp32", "amp-bf16"), ("contiguous",), "Flax")
    m, k = args.module, args.accumulate
    compute = jnp.bfloat16 if args.precision == "amp-bf16" else jnp.float32
    model = m.build(args.inputs, dtype=compute)
    variables = m.init_variables(model, 1, args.inputs, 0)
    params, stats = variables["params"], variables.get("batch_stats", {})
    images, labels = m.synthetic_batch(args.batch, args.inputs, 0)
    x, y = jnp.asarray(m.input_layout(images), compute), jnp.asarray(labels, jnp.int32)

    if args.mode == "infer":
        infer = jax.jit(
            lambda p, s, x: model.apply({"params": p, "batch_stats": s}, x, train=False)
        )

        def step() -> None:
            infer(params, stats, x).block_until_ready()

        time_steps(step, args)
        return

    tx = m.make_optimizer()
    if k > 1:
        tx = optax.MultiSteps(tx, every_k_schedule=k)
    state = [params, stats, tx.init(params)]

    @functools.partial(jax.jit, donate_argnums=(0, 1, 2))
    def train_step(params, stats, opt_state, x, y):
        def loss(p):
            variables = {"params": p, "batch_stats": stats}
            logits, new = model.apply(variables, x, train=True, mutable=["batch_stats"])
            return m.loss_fn(logits, y), new.get("batch_stats", {})

        (_, stats), grads = jax.value_and_grad(loss, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), stats, opt_state

    micro = list(zip(split(x, k), split(y, k), strict=True))

    def step() -> None:
        for xi, yi in micro:
            state[:] = train_step(*state, xi, yi)
        jax.block_until_ready(state)

    time_steps(step, args)


if __name__ == "__main__":
    main()
