"""PyTorch backend: support (what it runs for each knob value, and how), session (the step's
primitives), readings (what the worker reads off a session), backend (declarations,
environment, the session's construction).
torch is imported inside methods only, after the worker has set the environment."""

from membench.backends.torch_backend.backend import TorchBackend
from membench.backends.torch_backend.session import TorchSession, set_matmul_policy

__all__ = ["TorchBackend", "TorchSession", "set_matmul_policy"]
