"""The toy backend (docs/extending.md's worked example): numpy only.
support, session, readings, backend as every framework's; numpy is imported inside methods."""

from membench.backends.toy_backend.backend import ToyBackend
from membench.backends.toy_backend.session import ToySession

__all__ = ["ToyBackend", "ToySession"]
