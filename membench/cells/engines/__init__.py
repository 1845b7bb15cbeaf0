"""Engines: where the cells of a run are measured.

An engine has one method, `run(cells, store, control) -> supervision.RunResult`, with the runner's
contract: every cell ends as a Record in the store, stored final records are reused. `local`
is the runner itself (cells in sequence, each in a fresh process on this machine); `ray`
spreads the same worker processes over the nodes of a Ray cluster. Ray is imported only when
the ray engine is chosen. The protocol and what engines share: membench.cells.engines.contract.
"""

from __future__ import annotations

from collections.abc import Iterable

from membench.cells import supervision
from membench.cells.engines.contract import Engine, EngineError, node_label
from membench.cells.supervision import DEFAULT_CONTROL, RunControl
from membench.cells.worker_launch import allow_workers, kill_live_workers, workers_stopped
from membench.records import Cell, RecordStore

__all__ = ["ENGINES", "Engine", "EngineError", "LocalEngine", "engine_for", "node_label"]

ENGINES = ("local", "ray")


class LocalEngine:
    """Today's runner: cells in sequence, each in a fresh worker process on this machine.
    Capacity searches side by side call run from several threads at once (each its own
    cells in sequence); stop() then ends every worker in flight and refuses further cells."""

    name = "local"

    def __init__(self) -> None:
        allow_workers()  # a stop taken by an earlier engine of this process is not this one's

    def connect(self) -> None:
        pass

    def close(self) -> None:
        pass

    def stop(self) -> None:
        # the calling thread got the interrupt (its own worker is already ended); workers that
        # other threads wait on are ended here, and those threads start no more
        kill_live_workers()

    def run(
        self, cells: Iterable[Cell], store: RecordStore, control: RunControl = DEFAULT_CONTROL
    ) -> supervision.RunResult:
        if workers_stopped():
            raise KeyboardInterrupt("the run was stopped")
        return supervision.run(cells, store, control)  # nothing is resubmitted here


def engine_for(name: str, address: str | None = None, cells_per_node: int = 1) -> Engine:
    """The engine a command line names (ValueError for an unknown one)."""
    if name == "local":
        return LocalEngine()
    if name == "ray":
        try:
            from membench.cells.engines.ray_engine import RayEngine
        except ImportError as exc:
            raise EngineError(
                f"ray is not installed here ({exc}); pip install -r requirements/cpu.txt"
            ) from None

        return RayEngine(address, cells_per_node)
    raise ValueError(f"unknown engine {name!r}; valid: {', '.join(ENGINES)}")
