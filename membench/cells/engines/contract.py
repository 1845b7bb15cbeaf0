"""What every engine is (the Engine protocol), the error of one that cannot run here, and how a
cluster's node is named in progress lines: what the engines and their callers share, apart
from the choice of engine (membench.cells.engines).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from membench.cells import supervision
from membench.cells.supervision import DEFAULT_CONTROL, RunControl
from membench.records import Cell, RecordStore


class EngineError(RuntimeError):
    """An engine that cannot run here (no cluster, no usable node); the message says why."""


class Engine(Protocol):
    name: str

    def connect(self) -> None: ...

    def close(self) -> None: ...

    def stop(self) -> None:
        """Make runs in other threads cancel their cells and raise KeyboardInterrupt."""

    def run(
        self, cells: Iterable[Cell], store: RecordStore, control: RunControl = DEFAULT_CONTROL
    ) -> supervision.RunResult: ...


def node_label(identity: Mapping[str, Any]) -> str:
    """hostname/node-id prefix (two Ray nodes may share a host), and the GPU index."""
    label = f"{identity['hostname']}/{str(identity['ray_node_id'])[:6]}"
    return f"{label}:gpu{identity['gpu_index']}" if "gpu_index" in identity else label
