"""The toy backend: its declarations, environment and session."""

from __future__ import annotations

from membench.backends.toy_backend.session import ToySession
from membench.backends.toy_backend.support import BASELINE, SUPPORT

from membench.backends import Backend, BuildSpec, Support


class ToyBackend(Backend):
    name = "toy"
    baseline = BASELINE
    support: Support = SUPPORT

    def environment(self) -> dict[str, object]:
        import numpy

        return {"framework": "toy", "framework_version": numpy.__version__, "device": "cpu"}

    def create_session(self, spec: BuildSpec) -> ToySession:
        return ToySession(spec, "cpu")
