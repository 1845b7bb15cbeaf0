"""membench calibrate: measure the memory model's calibration cells and store each framework
version's constants (membench.memory.calibration: the constants and their fit) with their
provenance.

The cells are the `calibrate` preset's (registry.CALIBRATION_PRESET: the capacity searches'
strategies at sizes and batches no judged preset measures), run by the ordinary runner, one
fresh worker each, after cells that warm a framework's on-disk compile cache as a capacity
search does (membench.cells.compile_cache; their records kept apart).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from membench import argtypes, paths, registry
from membench.cells import planning, supervision, worker_launch
from membench.commands.parsing import console, fail
from membench.commands.run_options import RunOptions, add_writer
from membench.commands.selection import add_names, installed_frameworks
from membench.commands.store_guard import dirty_results, one_writer
from membench.records import Record, timestamp


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="measure the memory model's per-framework constants (calibration cells only)",
    )
    add_names(p, "workload", "framework")
    p.add_argument(
        "--results", type=argtypes.writable_dir, default=paths.RESULTS,
        help="results folder to write calibration/ into (default: this checkout's)",
    )  # fmt: skip
    p.add_argument("--fresh", action="store_true", help="re-measure cells already stored")
    add_writer(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from membench.environment import git_commit, machine_name

    workloads = args.workload or list(registry.preset(registry.CALIBRATION_PRESET).sizes)
    frameworks = args.framework or installed_frameworks()
    planning.cells_for(workloads, frameworks, [], registry.CALIBRATION_PRESET)  # checks the names
    if why := dirty_results(args.results):
        return fail(why, "membench calibrate")
    store = paths.calibration_records(machine_name(), str(git_commit()["commit"]), args.results)
    with one_writer(RunOptions.of(args), store) as opts:
        written = run_calibration(workloads, frameworks, args.results, args.fresh, opts.worker())
    for path in written:
        console.print(f"calibration: {path}")
    return 0


def calibration_cells(workloads: Sequence[str], frameworks: Sequence[str]) -> list:
    """The preset's cells, each strategy at its calibration batches."""
    p = registry.CALIBRATION_PRESET
    cells = planning.cells_for(workloads, frameworks, registry.CALIBRATION_STRATEGIES, p)
    base = {w: registry.preset(p).size(w).batch_sizes for w in workloads}
    out = []
    for c in cells:
        batches = registry.calibration_batches(c.workload, c.strategy)
        out.append(replace(c, batch_size=batches[base[c.workload].index(c.batch_size)]))
    return out


def run_calibration(
    workloads: Sequence[str],
    frameworks: Sequence[str],
    results: Path | None = None,
    fresh: bool = False,
    options: worker_launch.WorkerOptions = worker_launch.DEFAULT_OPTIONS,
) -> list[Path]:
    """Measure the calibration cells (each worker launched with the run's options), then fit
    and save one calibration per framework; returns the files written."""
    from membench.cells.compile_cache import warm_up_cells, warm_up_store
    from membench.cells.progress import run_with_progress
    from membench.environment import detected_device, git_commit, machine_name
    from membench.memory import calibration
    from membench.records import RecordStore

    commit = git_commit()
    machine = machine_name()
    store = RecordStore(paths.calibration_records(machine, str(commit["commit"]), results))
    cells = calibration_cells(workloads, frameworks)
    control = supervision.RunControl(fresh=fresh, worker=options)
    if warm := warm_up_cells(cells):  # the compile cache in the capacity searches' state
        console.print(f"warming the compile cache on disk first: {len(warm)} cells, kept apart")
        for record in run_with_progress(warm, warm_up_store(store), control).records:
            if record.status not in ("ok", "unsupported"):
                console.print(f"[yellow]warm-up {record.cell.key}: {record.status}: "
                              f"{record.reason[:200]}; its calibration cells may meet the "
                              "cache cold[/yellow]")  # fmt: skip
        console.print("calibration cells:")
    result = run_with_progress(cells, store, control)
    kind = "gpu" if detected_device() == "cuda" else "cpu"
    provenance = {
        "machine": machine,
        "commit": str(commit["commit"]),
        "dirty": bool(commit["dirty"]),
        "created_at": timestamp(),
        "records": str(store.root),
    }
    written = []
    for framework in frameworks:
        records = [r for r in result.records if r.cell.framework == framework]
        if not any(r.status == "ok" for r in records):
            continue
        cal = calibration.calibrate(_latest_version(records), kind, provenance)
        written.append(calibration.save(cal, results))
    return written


def _latest_version(records: list[Record]) -> list[Record]:
    """The records of the version the ok cells ran (a store may hold failures of none)."""
    ok = [r for r in records if r.status == "ok"]
    version = ok[-1].environment.get("framework_version")
    return [r for r in ok if r.environment.get("framework_version") == version]
