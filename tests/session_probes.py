"""What the parity tests read off a built session that the suite never reads: one step's
gradients, the eval-mode logits, JAX's update and whole batch. Computed from the session's own
pieces (its model, batch, optimizer, amp context, and the backend's backward or computation),
so that a strategy's gradients are those its train step would apply; the production sessions
carry none of this.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_SCALE_REDUCTIONS = 32  # a loss scaler halves its scale per overflow: 2**16 down to 2**-16


def framework(session: Any) -> str | None:
    """The backend a session class comes from (a test double derived from it included)."""
    for cls in type(session).__mro__:
        parts = cls.__module__.split(".")
        if parts[:2] == ["membench", "backends"] and parts[2].endswith("_backend"):
            return parts[2].removesuffix("_backend")
    return None


def gradients(session: Any, train_bn: bool = True) -> dict[str, np.ndarray]:
    """One step's gradients by parameter name, float64, unscaled, the weights left as they
    were; train_bn=False: BatchNorm on its running averages (samples independent)."""
    return _probe(GRADIENTS, "gradients", session)(session, train_bn)


def logits(session: Any) -> np.ndarray:
    """The model's eval-mode output for the whole batch, float32."""
    return _probe(LOGITS, "logits", session)(session)


def _probe(table: dict[str, Any], name: str, session: Any) -> Any:
    found = table.get(framework(session) or "")
    if found is None:
        raise NotImplementedError(f"{type(session).__name__} offers no {name}()")
    return found


# -- PyTorch ----------------------------------------------------------------------------------
def torch_gradients(s: Any, train_bn: bool = True) -> dict[str, np.ndarray]:
    """With loss scaling, a step whose scaled gradients overflow is skipped and the scale
    lowered, as GradScaler.step does in training; the first finite gradients are returned."""
    norms = [m for m in s.model.modules() if isinstance(m, s.torch.nn.modules.batchnorm._BatchNorm)]
    training = [m.training for m in norms]
    for m in norms if not train_bn else []:
        m.eval()
    try:
        grads = _torch_finite_gradients(s)
    finally:
        for m, was in zip(norms, training, strict=True):
            m.train(was)
    return {n: g.detach().double().cpu().numpy() for n, g in grads.items()}


def _torch_finite_gradients(s: Any) -> dict[str, Any]:
    from membench.backends.torch_backend.session import backward

    for _ in range(MAX_SCALE_REDUCTIONS):
        s.optimizer.zero_grad(set_to_none=True)
        backward(s)
        grads = {n: p.grad for n, p in s.model.named_parameters()}
        if not s.scaler:
            return grads
        s.scaler.unscale_(s.optimizer)
        if all(bool(s.torch.isfinite(g).all()) for g in grads.values()):
            return grads
        s.scaler.update()  # records the overflow: the next try uses a lower scale
    raise RuntimeError(f"gradients still overflow after {MAX_SCALE_REDUCTIONS} reductions")


def torch_logits(s: Any) -> np.ndarray:
    torch, training = s.torch, s.model.training
    s.model.eval()
    with torch.no_grad(), s.autocast:
        out = s.model(s.batches[0][0])
    s.model.train(training)
    return out.float().cpu().numpy()


# -- JAX --------------------------------------------------------------------------------------
def whole_batch(s: Any) -> tuple[Any, Any]:
    """A JAX session's (inputs, labels), concatenated where held as micro-batches."""
    jnp = s.jnp
    return jnp.concatenate([x for x, _ in s.batches]), jnp.concatenate([y for _, y in s.batches])


def jax_update(s: Any, train_bn: bool = True) -> Any:
    """The parameter change of one step; train_bn=False runs BatchNorm on its running
    averages."""
    from membench.backends.jax_backend.session import run_train_step

    jax = s.jax
    before = jax.tree_util.tree_map(lambda a: a.copy(), s.params)  # the step donates
    run_train_step(s, s.computation.jitted_train_step(), train_bn=train_bn)
    return jax.tree_util.tree_map(s.jnp.subtract, s.params, before)


def jax_gradients(s: Any, train_bn: bool = True) -> dict[str, np.ndarray]:
    """The parameter tree's paths joined by "/"."""
    flat = s.jax.tree_util.tree_flatten_with_path(_jax_gradient_tree(s, train_bn))[0]
    return {
        "/".join(str(getattr(k, "key", k)) for k in path): np.asarray(g, np.float64)
        for path, g in flat
    }


def _jax_gradient_tree(s: Any, train_bn: bool) -> Any:
    jax, c = s.jax, s.computation
    if s.dynamic_scale is None:
        # the mean of the micro-batches' gradients where MultiSteps accumulates them
        fn = jax.jit(c.grads, static_argnames="train_bn")
        grads = [fn(s.params, s.batch_stats, x, y, train_bn=train_bn)[2] for x, y in s.batches]
        return jax.tree_util.tree_map(lambda *g: sum(g) / len(g), *grads)
    scale, (x, y) = s.dynamic_scale, whole_batch(s)
    for _ in range(MAX_SCALE_REDUCTIONS):  # lower the scale until the gradients are finite

        def scaled(p):
            return c.loss(p, s.batch_stats, x, y, train_bn)

        scale, finite, _, grads = scale.value_and_grad(scaled, has_aux=True)(s.params)
        if bool(finite):
            s.dynamic_scale = scale
            return grads
    raise RuntimeError(f"gradients still overflow after {MAX_SCALE_REDUCTIONS} scale reductions")


def jax_logits(s: Any) -> np.ndarray:
    out = s.jax.jit(s.computation.infer_step)(s.params, s.batch_stats, whole_batch(s)[0])
    return np.asarray(out, np.float32)


# -- Jittor -----------------------------------------------------------------------------------
def jittor_gradients(s: Any, train_bn: bool = True) -> dict[str, np.ndarray]:
    from membench.backends.jittor_backend import freeze_batchnorm
    from membench.backends.jittor_backend.session import amp, backward

    s.optimizer.zero_grad()
    freeze_batchnorm(s.model, not train_bn)
    with amp(s):
        backward(s)
    freeze_batchnorm(s.model, False)
    names = {id(p): n for n, p in s.model.named_parameters()}
    out = {}
    for group in s.optimizer.param_groups:
        for p, g in zip(group["params"], group["grads"], strict=True):
            if not p.is_stop_grad():
                out[names[id(p)]] = g.numpy().astype("float64")
    return out


def jittor_logits(s: Any) -> np.ndarray:
    """Under the session's amp level."""
    from membench.backends.jittor_backend.session import amp

    jt = s.jt
    was_training = s.model.is_training()
    s.model.eval()
    with jt.no_grad(), amp(s):
        out = jt.concat([s.model(x) for x, _ in s.batches]).float32().numpy()
    if was_training:
        s.model.train()
    return out


GRADIENTS = {"torch": torch_gradients, "jax": jax_gradients, "jittor": jittor_gradients}
LOGITS = {"torch": torch_logits, "jax": jax_logits, "jittor": jittor_logits}
