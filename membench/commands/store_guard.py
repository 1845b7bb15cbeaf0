"""What guards a store while a command measures into it: results/ written only from a clean
commit, no folder written through a symbolic link, one writer at a time (the store's lock,
held with the run's options resolved), and the engine connected for the run."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from membench import file_rules, paths
from membench.cells import worker_launch
from membench.cells.engines import Engine, engine_for
from membench.commands.parsing import BadInput, console
from membench.commands.run_options import RunOptions
from membench.instruments import memory_cap, timeline
from membench.store_lock import store_lock


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
WRITTEN_FOLDERS = (paths.LOGS, "timelines", worker_launch.TRACES, paths.PROBES)


def unusable_path(root: Path) -> str | None:
    """Why a run may not write into the store at root (None: it may): the store is no folder,
    or a folder below it that a run writes into is a symbolic link (it could point anywhere)
    or no folder at all (a file, a FIFO). The lock file is store_lock's to judge."""
    if os.path.lexists(root) and not root.is_dir():  # a link the user named to a folder is fine
        return f"{root} is {file_rules.kind(root)}, not a folder"
    for base in (root, root / paths.PROBES):
        for name in WRITTEN_FOLDERS:
            if why := file_rules.folder_problem(base / name):
                return why
    return None


@contextmanager
def one_writer(opts: RunOptions, root: Path) -> Iterator[RunOptions]:
    """What a command that measures holds while it runs: the store's lock, and the options
    the run goes by, which it yields: the memory cap per cell resolved (--memory-cap, else the
    default of the memory available now; a Ray run leaves the default to each node), said,
    with the timeline and trace where asked; refused (BadInput) where the store, or a path in
    it the run writes, is not what it should be (unusable_path)."""
    if why := unusable_path(root):
        raise BadInput(
            f"store {root}: {why}: membench writes only into real folders and files of its "
            "own (no link, FIFO or device); remove it, or give another --store"
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
