"""membench bench: the main job. Measure the preset's cells, record them with asv, search
each workload's capacities within the preset's budgets, and print the decision tables."""

from __future__ import annotations

import argparse

from membench import paths, registry
from membench.commands.parsing import console, fail
from membench.commands.run_options import RunOptions, print_estimate, trace_refusal
from membench.commands.selection import Selection, add_selection, plan_cells, preset_of
from membench.commands.store_guard import connected_engine, dirty_results, one_writer
from membench.publish.summary import print_table
from membench.records import RecordStore


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench", help="the main job: measure, record with asv, search capacities, summarise"
    )
    add_selection(p)
    p.add_argument(
        "--no-capacity", action="store_true",
        help="skip the capacity searches the preset declares (its decision tables)",
    )  # fmt: skip
    p.add_argument(
        "--allow-busy", action="store_true",
        help="record cells still measured on a busy host after their second try, marked "
        "(default: kept out of asv and of the tables' speed figures)",
    )  # fmt: skip
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    opts = RunOptions.of(args)
    if why := trace_refusal(opts):
        return fail(why, "membench bench")
    preset = preset_of(args)
    sel = Selection.of(preset, args)
    cells = plan_cells(sel, preset, args.strategy or [])
    searches = [] if args.no_capacity else capacity_plans(preset, sel)
    return bench(preset, sel, cells, opts, searches, args.estimate)


def bench(
    preset: str, sel: Selection, cells: list, opts: RunOptions, searches: list,
    estimate: bool = False,
) -> int:  # fmt: skip
    """Measure the cells, record them with asv, then run the capacity searches (if every
    cell started) and print the decision tables; the exit status of the worst part. With
    estimate: the plan's time estimate, and nothing measured."""
    from membench.cells.progress import run_with_progress
    from membench.publish.asv_run import asv_env, machines_of, results_dir, run_asv
    from membench.publish.asv_suite import bench_regexes, default_store

    store = RecordStore(opts.store or default_store(preset))
    console.print(f"{len(cells)} cells, preset {preset}, records in {store.root}")
    if estimate:
        return print_estimate(cells, store, opts, searches)
    if why := dirty_results(store.root):
        return fail(why, "membench bench")
    with one_writer(opts, store.root) as run_opts, connected_engine(opts) as engine:
        result = run_with_progress(
            cells, store, run_opts.control(), engine, busy_rule=True, allow_busy=opts.allow_busy
        )
    if result.deferred:
        console.print(
            f"[yellow]{len(result.deferred)} cells not started (time is up): run the same "
            "command again to measure them[/yellow]"
        )
    asv_selection = sel.for_asv()  # --world-size reaches asv's regexes and its cells' filter
    regexes = bench_regexes(preset, asv_selection)
    if engine.name == "local":
        rc = run_asv(asv_env(preset, store, asv_selection), regexes)
    else:  # asv's history per machine: identical nodes share one, mixed ones get several
        hosts = machines_of(result.records)
        env = asv_env(preset, store, asv_selection)
        rc = max([run_asv(env, regexes, host=h) for h in hosts.values()] or [0])
    print_table(result.records, f"membench bench: preset {preset}")
    where = results_dir() if engine.name == "local" else results_dir().parent
    console.print(f"asv results: {where}; records: {store.root}")
    if searches and not result.deferred:
        rc = max(rc, bench_capacity(searches, opts, sel.names()))
    return rc


def capacity_plans(preset: str, sel: Selection) -> list:
    """The bench's capacity searches: one per workload its preset gives a budget, over the
    selected frameworks and strategies (none for an explicit batch, a GPU preset or on a
    GPU: a GPU session's searches are planned in parts, `membench plan`)."""
    from membench.capacity.run import plan_searches
    from membench.capacity.search_steps import budget_for
    from membench.environment import detected_device, git_commit, machine_name

    p = registry.preset(preset)
    if sel.batch_sizes or p.gpu or detected_device() == "cuda":
        return []
    machine, commit = machine_name(), str(git_commit()["commit"])
    for rule in p.capacity_left_out:
        if any(
            rule.covers(f, w, s)
            for f in sel.frameworks for w in sel.workloads for s in sel.strategies
        ):  # fmt: skip
            console.print(f"preset {preset} leaves capacity searches out: {rule.reason}")
    return [
        plan_searches(
            preset, w, sel.frameworks, sel.strategies, budget_for("cpu", budget), machine,
            commit, p.capacity_max_batch, main_job=True,
        )
        for w in sel.workloads
        for budget in p.capacity_budgets.get(w, ())
    ]  # fmt: skip


def bench_capacity(searches: list, opts: RunOptions, names: dict[str, list]) -> int:
    """The bench's last part: each workload's capacity searches, recorded with asv a budget
    at a time, then the decision tables; asv's worst exit status."""
    from membench.capacity.run import forecast_searches, run_searches
    from membench.cells.progress import console as progress_console
    from membench.cells.progress import print_forecast
    from membench.commands.capacity import record_with_asv
    from membench.environment import machine_name
    from membench.publish.summary import print_answers

    machine = machine_name()
    print_forecast(forecast_searches(searches, machine), "capacity probes")
    with connected_engine(opts) as engine:
        for plan in searches:
            with one_writer(opts, plan.folder) as run_opts:
                run_searches(
                    plan, engine, progress_console.print, machine=machine,
                    options=run_opts.worker(),
                )  # fmt: skip
    preset, folders = searches[0].preset, dict.fromkeys(p.folder for p in searches)
    recorded = [
        record_with_asv(preset, [p for p in searches if p.folder == folder], names)
        for folder in folders
    ]
    runs = [folder.name for folder in folders]
    page, report = write_summaries()
    print_answers(paths.RESULTS, machine, preset, runs, page(machine), report)
    return max(recorded, default=0)


def write_summaries() -> tuple:
    """The results pages (membench report --docs) and the HTML report (into paths.REPORT),
    regenerated with this run's results: (the results page of a machine, the report's
    index.html)."""
    from analysis.report import write_report
    from analysis.results_page import write_pages

    write_pages(paths.RESULTS)
    return paths.results_page, write_report(paths.RESULTS, paths.REPORT)
