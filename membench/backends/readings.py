"""What the worker reads off a built session besides its step: the framework's memory counters,
its own memory view, the step's marks on the timeline, the model's sizes, its notes, its ranks.

A framework's Readings subclass (<name>_backend/readings.py, named by its session's
readings_class) writes what its framework has of these; each default is the framework that has
none. It reads the session it was built for (self.session) and never steps it but to trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from membench.backends.declarations import Unsupported
from membench.metrics import GRADIENT_BYTES, OPTIMIZER_STATE_BYTES, PARAMETER_BYTES

if TYPE_CHECKING:
    from pathlib import Path

# A model's state between steps: what no strategy but sharding can remove (the analytic floor)
MODEL_STATE = (PARAMETER_BYTES, GRADIENT_BYTES, OPTIMIZER_STATE_BYTES)


class Readings:
    """A built session's counters, sizes and notes, as its framework reads them."""

    def __init__(self, session: Any) -> None:
        """Built right after the session's build(), before the advice strategies' set-up, for
        that session (a membench.backends.session.Session: not imported here, which imports
        this module)."""
        self.session: Any = session

    # -- memory counters ---------------------------------------------------------------
    def reset_peaks(self) -> None:
        """Reset the framework's resettable peak counters (if any)."""

    def after_step(self) -> None:
        """After each step is counted, before the hygiene (Jittor: its allocators read, as it
        keeps no peak counter, and its kernels compiled by the first step)."""

    def memory(self) -> dict[str, float]:
        """Framework memory counters read after the measured steps, named by layer."""
        return {}

    # -- the framework's own view of a step ----------------------------------------------
    def marked_step_phases(self) -> str:
        """Which parts of a step this session marks on the memory timeline
        (membench.instruments.marks), or why it marks the step as one phase."""
        return "the step as one phase"

    def trace_step(self, prefix: Path) -> dict[str, str]:
        """One more step under the framework's own memory view (`--trace`), its files written
        at prefix (a path without suffix): {what the file holds: its name}. Run after the
        measured steps: a view's overhead is never in the measured figures."""
        raise Unsupported(f"{type(self.session).__name__} offers no memory view of its own")

    # -- sizes and notes (Session.static_metrics and Session.notes add the shared ones) ----
    def model_sizes(self) -> dict[str, float]:
        """Sizes read off the live model and optimizer (MODEL_STATE among them where the
        framework knows them: those not given count 0 in the floor), with any figure the
        framework knows without running (parameter counts, compiler estimates)."""
        return {}

    def framework_notes(self) -> dict[str, object]:
        """The framework's own notes (its device, dtypes, flags read back, how it runs the
        strategy's knobs); an accumulate or batchnorm note written here is kept."""
        return {}

    # -- ranks ---------------------------------------------------------------------------
    def all_ranks(self, flag: bool) -> bool:
        """Whether flag holds on every rank of the cell (the worker's warm-up must stop at the
        same step on all of them, or their collectives wait forever); one rank: flag."""
        return flag

    def rank_metrics(self) -> list[dict[str, float]]:
        """Per-device metrics of a session that drives several devices from this one process
        (JAX's sharding), in device order; [] where the process is one rank."""
        return []
