"""What the commands share: the console, refusals, the selection of cells, the options of a
command that measures (store lock, memory cap, engine) and their arguments."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from membench import argtypes, paths, registry
from membench.argtypes import positive_int, positive_seconds
from membench.cells import planning, supervision
from membench.cells.engines import ENGINES, Engine, engine_for
from membench.instruments import memory_cap, timeline
from membench.records import RecordStore
from membench.store_lock import store_lock

console = Console(width=160)

# -w, -f, -s: comma-separated, and repeatable (`-s a -s b` is `-s a,b`, never the last one only)
NAMES_ALL = "comma-separated or repeated (default: all)"
NAMES_INSTALLED = "comma-separated or repeated (default: installed)"


class BadInput(ValueError):
    """Input refused before any work, found after parsing (main: one line, exit 2)."""


def fail(message: str, prog: str = "membench") -> int:
    """A refusal: one line on stderr, exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


class ExtendUnique(argparse.Action):
    """A repeatable list option (`-s a,b -s b`): the values in the order given, each once, so
    that a name given twice is one cell, not two."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,  # a list: what the option's type returned
        option_string: str | None = None,
    ) -> None:
        given = [*(getattr(namespace, self.dest, None) or []), *(values or [])]
        setattr(namespace, self.dest, list(dict.fromkeys(given)))


class Parser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr and exit 2, before any work."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def installed_frameworks() -> list[str]:
    return [f for f in registry.FRAMEWORKS if registry.framework_installed(f)]


@dataclass(frozen=True)
class Selection:
    """The cells a command works on: empty lists mean the preset's (or every installed)."""

    workloads: list[str]
    frameworks: list[str]
    strategies: list[str]
    batch_sizes: list[int] = field(default_factory=list)
    world_size: int | None = None  # ranks of the sharding strategies' cells

    @classmethod
    def of(cls, preset: str, args: argparse.Namespace) -> Selection:
        """The command line's selection, its defaults filled from the preset."""
        return cls.filled(
            preset, args.workload, args.framework, args.strategy, getattr(args, "batch", None),
            getattr(args, "world_size", None),
        )  # fmt: skip

    @classmethod
    def filled(
        cls,
        preset: str,
        workloads: Sequence[str] | None = None,
        frameworks: Sequence[str] | None = None,
        strategies: Sequence[str] | None = None,
        batch_sizes: Sequence[int] | None = None,
        world_size: int | None = None,
    ) -> Selection:
        p = registry.preset(preset)
        return cls(
            list(workloads or p.sizes), list(frameworks or installed_frameworks()),
            list(strategies or p.strategies or registry.STRATEGIES), list(batch_sizes or []),
            world_size,
        )  # fmt: skip

    def names(self) -> dict[str, list]:
        """Workloads, frameworks and strategies as the asv helpers take them."""
        return {"workloads": self.workloads, "frameworks": self.frameworks,
                "strategies": self.strategies}  # fmt: skip

    def for_asv(self) -> dict[str, list]:
        """The whole selection as asv_suite's helpers take it (world_size: [] or [ranks])."""
        ranks = [self.world_size] if self.world_size else []
        return {**self.names(), "batch_sizes": self.batch_sizes, "world_size": ranks}


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
        return cls(**found)

    def control(self) -> supervision.RunControl:
        """What the engine's run takes of these options (no callbacks)."""
        return supervision.RunControl(
            self.timeout, self.fresh, not self.keep_failed, self.deadline, worker=self.worker()
        )

    def worker(self) -> supervision.WorkerOptions:
        """What each cell's worker is launched with: the memory cap (as one_writer resolves
        it), the timeline and the trace."""
        return supervision.WorkerOptions(self.memory_cap, self.timeline, self.trace)


def world_size_refusal(ranks: int | None, named: Sequence[str]) -> str | None:
    """Why --world-size cannot be taken (None: it can): a strategy named on the command line
    that does not shard, or more ranks than this machine has cores (CPU) or devices (GPU)."""
    if not ranks:
        return None
    for name in named:
        if registry.strategy(name).sharding == "none":
            return f"--world-size: strategy {name} does not shard (it runs on one rank)"
    from membench.environment import detected_device, gpu_info

    if detected_device() == "cuda":
        bound, what = int((gpu_info() or {}).get("gpu_count", 1)), "GPUs"
    else:
        bound, what = os.cpu_count() or 1, "CPU cores"
    if ranks > bound:
        return f"--world-size {ranks}: this machine has {bound} {what} (one rank each at most)"
    return None


def plan_cells(sel: Selection, preset: str, named: Sequence[str] = ()) -> list:
    """The selection's cells (names checked), after saying what the preset leaves out;
    named: the strategies the command line named (those --world-size must shard)."""
    if why := world_size_refusal(sel.world_size, named):
        raise BadInput(why)
    cells = planning.cells_for(
        sel.workloads, sel.frameworks, sel.strategies, preset, sel.batch_sizes, sel.world_size
    )
    skipped = planning.left_out(sel.workloads, sel.frameworks, sel.strategies, preset)
    for reason, n in skipped.items():
        console.print(f"preset {preset} leaves {n} cells to another preset: {reason}")
    return cells


def trace_refusal(opts: RunOptions) -> str | None:
    """--trace writes its views into the store beside the worker: not on a Ray node's."""
    if opts.trace and opts.engine != "local":
        return "--trace runs with the local engine only (a node's views would stay on the node)"
    return None


def dirty_results(destination: Path) -> str | None:
    """Why a run may not write into results/: records there name the commit that measured
    them, which uncommitted code changes would make untrue (a store elsewhere is fine)."""
    from membench.environment import CODE_PATHS, git_commit

    inside = destination.resolve().is_relative_to(paths.RESULTS.resolve())
    if inside and git_commit().get("dirty"):
        return (
            f"uncommitted changes under {', '.join(CODE_PATHS)}: results/ holds only what a "
            "commit measured; commit first, or give --store outside results/"
        )
    return None


# The folders a run writes into below its store (a capacity folder's probes store included).
WRITTEN_FOLDERS = (paths.LOGS, "timelines", supervision.TRACES, paths.PROBES)


def linked_folder(root: Path) -> Path | None:
    """A folder below the store that a run writes into and that is a symbolic link (None:
    there is none). A run writes nothing through a link: it could point anywhere."""
    for base in (root, root / paths.PROBES):
        for name in WRITTEN_FOLDERS:
            if (base / name).is_symlink():
                return base / name
    return None


@contextmanager
def one_writer(opts: RunOptions, root: Path) -> Iterator[RunOptions]:
    """What a command that measures holds while it runs: the store's lock, and the options
    the run goes by, which it yields: the memory cap per cell resolved (--memory-cap, else the
    default of the memory available now; a Ray run leaves the default to each node), said,
    with the timeline and trace where asked; refused (BadInput) where a folder the run writes
    into is a symbolic link."""
    if link := linked_folder(root):
        raise BadInput(
            f"{link} is a symbolic link (to {os.readlink(link)}): membench writes nothing "
            "through a link in a store; remove it, or give another --store"
        )

    cap = opts.memory_cap
    if cap is None and opts.engine == "local":
        cap = memory_cap.default_cap()
    if cap is not None:
        cap = float(round(cap))  # whole bytes, as every cell's record names it
        console.print(f"memory cap per cell: {cap / 2**30:.2f} GiB resident (--memory-cap)")
    if opts.trace:
        console.print(
            "framework memory views (--trace): after each measured cell, a worker of its own "
            "runs a step under the framework's view, into the store's traces/"
        )
    if opts.timeline:
        console.print(
            f"memory timeline per cell: sampled every {timeline.INTERVAL_SECONDS * 1000:.0f} ms "
            "(--timeline), in the store's timelines/"
        )

    def waiting(text: str) -> None:
        console.print(f"[yellow]{text}[/yellow]")

    with store_lock(root, opts.wait, waiting):
        yield dataclasses.replace(opts, memory_cap=cap)


@contextmanager
def connected_engine(opts: RunOptions) -> Iterator[Engine]:
    """The engine the command line chose, connected, and closed afterwards."""
    engine = engine_for(opts.engine, opts.address, opts.cells_per_node)
    if opts.engine == "ray":
        console.print(
            f"engine ray: cluster {opts.address or 'started on this machine'} (Ray's own log: "
            ".membench/ray.log)"
        )
    engine.connect()
    try:
        yield engine
    finally:
        engine.close()


def print_estimate(cells: list, store: RecordStore, opts: RunOptions, plans: Sequence = ()) -> int:
    """--estimate: the plan's time, cells and capacity probes, and nothing measured."""
    from membench.capacity.run import forecast_searches
    from membench.cells.estimate import forecast, minutes
    from membench.cells.progress import print_forecast
    from membench.environment import machine_name

    c = opts.control()
    run = forecast(cells, store, machine_name(), c.fresh, c.retry_failed, c.timeout)
    print_forecast(run)
    total = run.total_seconds()
    if plans:
        probes = forecast_searches(plans, machine_name())
        print_forecast(probes, "capacity probes")
        total += probes.total_seconds()
    console.print(f"estimated {minutes(total)} in all; nothing measured (--estimate)")
    return 0


def add_names(p: argparse.ArgumentParser, *which: str) -> None:
    """-w, -f, -s (each comma-separated or repeated), as many of them as the command takes."""
    helps = {"workload": NAMES_ALL, "framework": NAMES_INSTALLED, "strategy": NAMES_ALL}
    for name in which:
        p.add_argument(
            f"-{name[0]}", f"--{name}", type=argtypes.names, action=ExtendUnique, help=helps[name]
        )


def add_batch(p: argparse.ArgumentParser, default: str = "the preset's grid") -> None:
    p.add_argument(
        "-b", "--batch", type=argtypes.batch_sizes, action=ExtendUnique,
        help=f"batch sizes, comma-separated or repeated (default: {default})",
    )  # fmt: skip


def preset_names() -> str:
    """The registry's presets, for help texts (written from the table, so none is missing)."""
    return ", ".join(registry.PRESETS)


def add_engine(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine", choices=ENGINES, default="local",
        help="local: cells in sequence on this machine (default); ray: over a Ray cluster",
    )  # fmt: skip
    p.add_argument(
        "--address",
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
        f"{memory_cap.DEFAULT_SHARE * 100:.0f}%% of the memory available at the start)",
    )  # fmt: skip


def add_selection(p: argparse.ArgumentParser) -> None:
    """The arguments of run and bench: which cells, where, and how they are measured."""
    add_names(p, "workload", "framework", "strategy")
    add_batch(p)
    p.add_argument(
        "-p", "--preset", type=argtypes.name,
        help=f"one of {preset_names()} (default: $MEMBENCH_PRESET, else from the device: gpu "
        "where NVML sees an NVIDIA GPU, cpu-quick elsewhere)",
    )  # fmt: skip
    p.add_argument(
        "--world-size", type=positive_int,
        help="ranks of each sharding strategy's cell (default: the preset's; others run on one)",
    )  # fmt: skip
    p.add_argument("--store", type=argtypes.writable_dir, help="record directory")
    add_timeout_fresh(p)
    p.add_argument(
        "--timeline", action="store_true",
        help="sample each cell's memory every "
        f"{timeline.INTERVAL_SECONDS * 1000:.0f} ms from outside its worker, phases marked, into "
        "the store's timelines/ (the sampler takes 1-4%% of one core here: off by default)",
    )  # fmt: skip
    p.add_argument(
        "--trace", action="store_true",
        help="after each measured cell, a worker of its own runs a step under the framework's "
        "own memory view (torch's profiler memory timeline on CPU, its CUDA snapshot on GPU; "
        "JAX's device memory profile; Jittor's peak memory report), into the store's traces/ "
        "(local engine)",
    )  # fmt: skip
    p.add_argument(
        "--keep-failed", action="store_true", help="do not retry stored timeout/error cells"
    )
    add_estimate(p, "print the plan's time estimate and exit")
    add_writer(p)
    add_engine(p)


def add_timeout_fresh(p: argparse.ArgumentParser) -> None:
    """--timeout and --fresh: how a measuring command treats each cell and the stored ones."""
    p.add_argument(
        "--timeout", type=positive_seconds, help="seconds per cell (default: the preset's)"
    )
    p.add_argument("--fresh", action="store_true", help="re-measure cells already stored")


def add_estimate(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--estimate", action="store_true", help=text)


def preset_of(args: argparse.Namespace) -> str:
    """The preset the command line names, else the device's default."""
    from membench.environment import default_preset

    return registry.preset(args.preset or default_preset()).name
