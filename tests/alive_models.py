"""A test double for the two-model strategies: a backend's own session, built the backend's
way, that also counts the parameter bytes of every model it built that is still alive, and
tells on_phase when a model of a two-sequential step is built and when it is freed.

The suite's sessions carry none of this: the double derives from the backend's session class
and watches the primitives the template calls (build, inference_model, release).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterable
from typing import Any
from unittest import mock

from membench.backends import Backend, BuildSpec


def build_watched(
    backend: Backend,
    session_class: type,
    spec: BuildSpec,
    first: Callable[[Any], Any],
    units: Callable[[Any], Iterable[Any]],
    nbytes: Callable[[Any], int],
) -> Any:
    """backend.build(spec) with session_class (the one the backend's module constructs)
    replaced by the watching double.

    first(session): the model build() made (torch, Jittor: session.model; JAX: its
    (params, batch_stats)); units(model): the objects whose life is the model's (the module
    object, or the arrays of the trees); nbytes(unit): its parameter bytes, 0 where the
    framework has deleted it though it is still referenced (a donated JAX array)."""
    home = sys.modules[type(backend).__module__]

    class Watched(session_class):
        def build(self) -> None:
            self._alive: list[weakref.ref] = []
            self._turn = 0
            self.on_phase: Callable[[str], None] | None = None
            super().build()
            self.one_model_bytes = self._track(first(self))

        def inference_model(self, seed: int) -> Any:
            model = super().inference_model(seed)
            self._track(model)
            self._tell(f"built model {self._turn}")
            return model

        def release(self) -> None:
            super().release()
            if self._tell(f"freed model {self._turn}"):
                self._turn += 1

        def alive_parameter_bytes(self) -> int:
            return sum(nbytes(u) for r in self._alive if (u := r()) is not None)

        def _track(self, model: Any) -> int:
            found = list(units(model))
            self._alive += [weakref.ref(u) for u in found]
            return sum(nbytes(u) for u in found)

        def _tell(self, phase: str) -> bool:
            if self.on_phase is None:
                return False
            self.on_phase(phase)
            return True

    with mock.patch.object(home, session_class.__name__, Watched):
        return backend.build(spec)
