"""membench run: measure cells and print their records."""

from __future__ import annotations

import argparse

from membench import paths
from membench.commands.parsing import console, fail
from membench.commands.run_options import RunOptions, print_estimate, trace_refusal
from membench.commands.selection import Selection, add_selection, plan_cells, preset_of
from membench.commands.store_guard import connected_engine, dirty_results, one_writer
from membench.publish.summary import print_table
from membench.records import RecordStore


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="measure cells and print their records")
    add_selection(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from membench.cells.progress import run_with_progress
    from membench.environment import machine_name

    opts = RunOptions.of(args)
    if why := trace_refusal(opts):
        return fail(why, "membench run")
    preset = preset_of(args)
    cells = plan_cells(Selection.of(preset, args), preset, args.strategy or [])
    store = RecordStore(opts.store or paths.local_store(machine_name(), preset))
    console.print(f"{len(cells)} cells, preset {preset}, records in {store.root}")
    if args.estimate:
        return print_estimate(cells, store, opts)
    if why := dirty_results(store.root):  # e.g. a timeline store under results/timelines
        return fail(why, "membench run")
    with one_writer(opts, store.root) as opts, connected_engine(opts) as engine:
        result = run_with_progress(cells, store, opts.control(), engine)
    print_table(result.records, f"membench run: preset {preset} ({store.root})")
    console.print(f"measured {result.measured}, kept from an earlier run {result.reused}")
    return 0
