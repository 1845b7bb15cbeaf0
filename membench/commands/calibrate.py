"""membench calibrate: the memory model's per-framework constants, from calibration cells."""

from __future__ import annotations

import argparse

from membench import argtypes, paths, registry
from membench.cells import planning
from membench.commands.parsing import console, fail
from membench.commands.run_options import RunOptions, add_writer
from membench.commands.selection import add_names, installed_frameworks
from membench.commands.store_guard import dirty_results, one_writer


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
    from membench.capacity.calibrate import run_calibration
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
