"""The words of the backend contract its parts share: the cell a backend builds (BuildSpec),
what a backend declares it runs (Implemented, ANY, Support) and a refusal at run time
(Unsupported). The package (membench.backends), its sessions and readings import them from
here, so that no module of the package imports the package back.
"""

from __future__ import annotations

from dataclasses import dataclass

from membench.records import Cell
from membench.registry import Strategy, WorkloadSize, preset, strategy


class Unsupported(Exception):
    """This framework cannot run this cell here; the message says why."""


@dataclass(frozen=True)
class BuildSpec:
    workload: str
    strategy: Strategy
    size: WorkloadSize
    batch_size: int  # the global batch, split evenly over the ranks
    seed: int = 0
    world_size: int = 1

    @classmethod
    def of(cls, cell: Cell) -> BuildSpec:
        """What a backend builds for a cell (names checked: UnknownNameError lists the valid)."""
        size = preset(cell.preset).size(cell.workload)
        return cls(
            cell.workload, strategy(cell.strategy), size, cell.batch_size,
            world_size=cell.world_size,
        )  # fmt: skip


# -- declared support ----------------------------------------------------------------------
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Implemented:
    """A knob value a backend runs: how it runs it, and on which devices (with the reason it
    cannot elsewhere)."""

    how: str
    devices: tuple[str, ...] = DEVICES
    elsewhere: str = ""


class _AnyValue:
    def __repr__(self) -> str:
        return "ANY"


# A declaration for every value of a knob but its default (accumulate: any k > 1).
ANY = _AnyValue()

# knob -> value -> Implemented, or the reason the value is refused. A knob's default (the
# baseline's value) needs no declaration; any other value not declared is refused.
Support = dict[str, dict[object, "Implemented | str"]]
