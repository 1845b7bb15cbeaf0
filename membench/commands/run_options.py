"""How a command that measures runs its cells: RunOptions (what the run's engine and each
cell's worker are given), the arguments that set them (engine, writer, timeout and fresh,
estimate), the refusal of --trace beyond the local engine, and --estimate's forecast."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from membench import argtypes, settings
from membench.argtypes import positive_int
from membench.cells import supervision, worker_launch
from membench.cells.engines import ENGINES
from membench.commands.parsing import console
from membench.instruments import memory_cap
from membench.records import RecordStore


@dataclass(frozen=True)
class RunOptions:
    """How a measuring command runs its cells."""

    store: Path | None = None
    timeout: float | None = None
    fresh: bool = False
    keep_failed: bool = False
    deadline: float | None = None  # no cell starts after this (time.monotonic())
    allow_busy: bool = False
    engine: str = "local"
    address: str | None = None
    cells_per_node: int = 1
    memory_cap: float | None = None
    wait: bool = False
    timeline: bool = False
    trace: bool = False

    @classmethod
    def of(cls, args: argparse.Namespace) -> RunOptions:
        found = {k: getattr(args, k) for k in cls.__dataclass_fields__ if hasattr(args, k)}
        if "memory_cap" in found and found["memory_cap"] is None:
            found["memory_cap"] = settings.value(memory_cap.ENV)  # checked as the flag is
        return cls(**found)

    def control(self) -> supervision.RunControl:
        """What the engine's run takes of these options (no callbacks)."""
        return supervision.RunControl(
            self.timeout, self.fresh, not self.keep_failed, self.deadline, worker=self.worker()
        )

    def worker(self) -> worker_launch.WorkerOptions:
        """What each cell's worker is launched with: the memory cap (as one_writer resolves
        it), the timeline and the trace."""
        return worker_launch.WorkerOptions(self.memory_cap, self.timeline, self.trace)


def trace_refusal(opts: RunOptions) -> str | None:
    """--trace writes its views into the store beside the worker: not on a Ray node's."""
    if opts.trace and opts.engine != "local":
        return "--trace runs with the local engine only (a node's views would stay on the node)"
    return None


def print_estimate(cells: list, store: RecordStore, opts: RunOptions, plans: Sequence = ()) -> int:
    """--estimate: the plan's time, cells and capacity probes, and nothing measured."""
    from membench.capacity.run import forecast_searches
    from membench.cells.estimate import forecast, minutes
    from membench.cells.progress import print_forecast
    from membench.cells.supervision import resume_cap
    from membench.environment import machine_name

    c = opts.control()
    cap = resume_cap(c, opts.engine)
    run = forecast(cells, store, machine_name(), c.fresh, c.retry_failed, c.timeout, cap)
    print_forecast(run)
    total = run.total_seconds()
    if plans:
        probes = forecast_searches(plans, machine_name())
        print_forecast(probes, "capacity probes")
        total += probes.total_seconds()
    console.print(f"estimated {minutes(total)} in all; nothing measured (--estimate)")
    return 0


def add_engine(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine", choices=ENGINES, default="local",
        help="local: cells in sequence on this machine (default); ray: over a Ray cluster",
    )  # fmt: skip
    p.add_argument(
        "--address",
        type=argtypes.ray_address,
        help="with --engine ray: the cluster (auto, or HOST:PORT of its head); "
        "default: a one-node Ray started on this machine",
    )
    p.add_argument(
        "--cells-per-node", type=positive_int, default=1,
        help="with --engine ray on CPU nodes: cells sharing one node (default 1: a whole "
        "node per cell; records say when it was shared)",
    )  # fmt: skip


def add_writer(p: argparse.ArgumentParser) -> None:
    """Options of a command that measures into a store (one writer at a time)."""
    p.add_argument(
        "--wait", action="store_true",
        help="if another run holds the store, wait for it (default: refuse at once)",
    )  # fmt: skip
    p.add_argument(
        "--memory-cap", type=argtypes.memory_cap_bytes,
        help=f"resident memory a cell's processes may hold, e.g. 8GiB (default: "
        f"{memory_cap.DEFAULT_SHARE * 100:.0f}%% of the memory available at the start; "
        f"${memory_cap.ENV} sets another)",
    )  # fmt: skip


def add_timeout_fresh(p: argparse.ArgumentParser) -> None:
    """--timeout and --fresh: how a measuring command treats each cell and the stored ones."""
    p.add_argument(
        "--timeout",
        type=argtypes.cell_timeout,
        help="seconds per cell (default: the preset's)",
    )
    p.add_argument("--fresh", action="store_true", help="re-measure cells already stored")


def add_estimate(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--estimate", action="store_true", help=text)
