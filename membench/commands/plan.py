"""membench plan: a GPU session's plan (membench.cells.gpu_session), its parts with their
estimated time, or one part run (each part resumable, each within one device command)."""

from __future__ import annotations

import argparse
import time

from rich.table import Table

from membench import argtypes, environment, registry
from membench.argtypes import positive_seconds
from membench.capacity.run import settled_runs
from membench.cells.gpu_session import PLANS
from membench.commands import bench, capacity, selfcheck
from membench.commands.parsing import BadInput, console
from membench.commands.run_options import RunOptions
from membench.commands.selection import Selection, plan_cells, refuse_gpu_preset_here


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan", help="a GPU plan's parts and estimated times, or run one part (resumable)"
    )
    p.add_argument("plan", help=f"one of {', '.join(PLANS)}")
    p.add_argument("part", nargs="?", help="the part to run (default: list the parts)")
    p.add_argument(
        "--seconds", type=positive_seconds, default=540,
        help="no cell starts late for this (default 540)",
    )  # fmt: skip
    p.add_argument(
        "--skip", type=argtypes.names, help="frameworks left out (e.g. one that cannot build)"
    )
    p.add_argument(
        "--list", action="store_true",
        help="each part's name and estimated seconds, a line each, set-up first (for "
        "scripts/gpu_run.sh)",
    )  # fmt: skip
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from membench.cells import gpu_session

    for name in args.skip or []:  # a misspelt one would skip nothing, without a word
        registry.framework(name)  # UnknownNameError (one the plan does not measure is fine)
    if args.list:  # set-up first: scripts/gpu_node.sh's step
        print(f"setup {gpu_session.SETUP_SECONDS:.0f}")
        for part in gpu_session.parts(args.plan):
            print(f"{part.name} {gpu_session.estimate_seconds(part):.0f}")
        return 0
    if not args.part:
        return print_parts(args.plan)
    if args.part == "setup":
        raise BadInput("setup is scripts/gpu_node.sh's step: bash scripts/gpu_node.sh setup")
    part = gpu_session.part(args.plan, args.part)
    for preset in {c.preset for c in part.cells} | {s.preset for s in part.searches}:
        refuse_gpu_preset_here(preset)
    started = time.monotonic()
    rc = 0
    skip = set(args.skip or [])
    # cells start while time is left for them and for asv to record the part
    reserve = gpu_session.ASV_SECONDS_PER_CELL * gpu_session.recorded_cells(part) + 30
    deadline = started + args.seconds - reserve
    opts = RunOptions(deadline=deadline)
    for cells in part.cells:
        if frameworks := [f for f in cells.frameworks if f not in skip]:
            sel = Selection.filled(
                cells.preset, [cells.workload], frameworks, cells.strategies, cells.batch_sizes
            )
            planned = plan_cells(sel, cells.preset)
            rc = max(rc, bench.bench(cells.preset, sel, planned, opts, searches=[]))
    rc = max(rc, run_searches(part, skip, deadline))
    if part.selfcheck and time.monotonic() < deadline:
        check = part.selfcheck
        if kept := [f for f in check.frameworks if f not in skip]:
            args = argparse.Namespace(
                framework=kept, strategy=list(check.strategies), size=check.image_size,
                batch=check.batch, json=None, save=True,
            )  # fmt: skip
            rc = max(rc, selfcheck.main(args))
    console.print(f"part {part.name}: {time.monotonic() - started:.0f} s")
    return rc


def run_searches(part, skip: set[str], deadline: float) -> int:
    """The part's searches not settled on this machine by any commit, side_by_side of them at
    once where the part says so (searches alike in all but their names run as one selection);
    none starts past the deadline."""
    machine = environment.machine_name() if part.searches else ""
    rc = 0
    groups: dict[tuple, list] = {}
    for search in part.searches:
        alike = (search.preset, search.budget_bytes, search.tolerance, search.first,
                 search.repeats, search.whole_card)  # fmt: skip
        groups.setdefault(alike if part.side_by_side > 1 else (search,), []).append(search)
    for searches in groups.values():
        if time.monotonic() > deadline:  # a search started now would outlast the command
            console.print(f"part {part.name}: out of time; run it again to resume")
            break
        settled, todo = set(), []
        for search in searches:
            done = settled_runs(
                machine,
                search.preset,
                search.budget_bytes,
                search.workload,
                search.strategy,
                whole_card=search.whole_card,
            )
            for f in search.frameworks:
                if f in done and f not in skip:
                    console.print(f"{search.workload} {f} {search.strategy}: settled in {done[f]}")
                    settled.add((search.workload, f, search.strategy))
                elif f not in skip:
                    todo.append((search.workload, f, search.strategy))
        if not todo:
            continue
        first = searches[0]
        declared = [(s.workload, f, s.strategy) for s in searches for f in s.frameworks]
        names = [
            [n for n in dict.fromkeys(t[i] for t in declared) if n in {x[i] for x in todo}]
            for i in range(3)
        ]  # in the part's order
        sel = Selection.filled(first.preset, *names)
        # the selection's combinations that are not this group's to search count as settled
        planned = {(w, f, s) for w in names[0] for f in names[1] for s in names[2]}
        rc = max(rc, capacity.search(
            first.preset, sel, float(first.budget_bytes), RunOptions(), 65536, first.tolerance,
            first.first, repeats=first.repeats, side_by_side=part.side_by_side,
            settled=frozenset(settled | (planned - set(todo))), whole_card=first.whole_card,
        ))  # fmt: skip
    return rc


def print_parts(name: str) -> int:
    from membench.cells import gpu_session

    t = Table(
        title=f"plan {name}: one command per part, each aimed under 9 minutes (a part that "
        "outlasts its command resumes when run again)"
    )
    for h in ["part", "estimated min", "what"]:
        t.add_column(h)
    t.add_row(
        "setup", f"{gpu_session.SETUP_SECONDS / 60:.1f}",
        "offline install, Jittor's core (bash scripts/gpu_node.sh setup)",
    )  # fmt: skip
    total = gpu_session.SETUP_SECONDS
    for part in gpu_session.parts(name):
        seconds = gpu_session.estimate_seconds(part)
        total += seconds
        t.add_row(part.name, f"{seconds / 60:.1f}", part.description)
    t.add_row(
        "total", f"{total / 60:.1f}", "estimated by the cost model in membench/cells/gpu_session.py"
    )
    console.print(t)
    return 0
