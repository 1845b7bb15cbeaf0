"""JAX/Flax backend. jax is imported inside methods, after the worker has set the env.

Used the way JAX's own experts use it: the whole train step is one jitted function with
parameters, BatchNorm statistics and optimizer state donated; gradient accumulation is
optax.MultiSteps, one jitted micro-step per call (the in-graph lax.scan is its own strategy);
mixed precision is the model's compute dtype over float32 parameters, with dynamic loss
scaling for float16.

support (what it runs for each knob value, and how), session (the step's primitives),
computation (the functions XLA compiles), readings (what the worker reads off a session),
backend (declarations, environment before the import, the session's construction).
"""

from membench.backends.jax_backend.backend import (
    MATMUL_PRECISION,
    MEM_FRACTION,
    JaxBackend,
    fraction_variable,
)
from membench.backends.jax_backend.session import JaxSession

__all__ = ["MATMUL_PRECISION", "MEM_FRACTION", "JaxBackend", "JaxSession", "fraction_variable"]
