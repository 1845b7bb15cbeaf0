"""membench selfcheck: the suite's ResNet-50 cells beside each framework's plain loop, and
the probes' cost (membench.cells.selfcheck)."""

from __future__ import annotations

import argparse

from membench import argtypes, paths, registry
from membench.argtypes import positive_int
from membench.commands.parsing import fail
from membench.commands.selection import NAMES_INSTALLED
from membench.commands.store_guard import dirty_results
from membench.records import write_json_atomic


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "selfcheck",
        help="the suite's ResNet-50 cells beside each framework's plain loop, and the probes' cost",
    )
    p.add_argument("-f", "--framework", type=argtypes.names, action="extend", help=NAMES_INSTALLED)
    p.add_argument(
        "-s",
        "--strategy",
        type=argtypes.names,
        help="comma-separated (default: baseline,infer,accumulate-4)",
    )
    p.add_argument("--size", type=positive_int, default=64, help="image size (default 64)")
    p.add_argument("--batch", type=positive_int, default=4, help="batch size (default 4)")
    p.add_argument(
        "--json", type=argtypes.writable_file, help="also write the results to this file"
    )
    p.add_argument(
        "--save", action="store_true",
        help="also keep the results under results/selfcheck/ (committed code only), where the "
        "results page reads them",
    )  # fmt: skip
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from membench.cells import selfcheck as sc

    frameworks = args.framework or [
        f for f in sc.reference_loops() if registry.framework_installed(f)
    ]
    strategies = args.strategy or list(registry.SELFCHECK_STRATEGIES)
    for name in strategies:
        registry.strategy(name)
    for name in frameworks:
        if name not in sc.reference_loops():
            registry.framework(name)  # an unknown name lists the valid ones
            return fail(f"{name} has no reference loop (models/reference/)")
    provenance, saved = {}, None
    if args.json or args.save:  # read before the run: the saved file's name and its content
        from membench.environment import cpu_facts, cpu_model, git_commit, machine_name

        # the CPU's numbers and ISA flags beside its name: what the machine is named from
        provenance = {"machine": machine_name(), "cpu": cpu_model(), **cpu_facts()}
        provenance["git"] = git_commit()
    if args.save:
        commit = str(provenance["git"].get("commit") or "")
        saved = paths.selfcheck_file(
            provenance["machine"], sc.WORKLOAD, args.size, args.batch, commit
        )
        if why := dirty_results(saved):
            return fail(why, "membench selfcheck")
    print(
        f"selfcheck: {sc.WORKLOAD} {args.size}x{args.size}, batch {args.batch}; suite cell "
        f"then reference loop, each a fresh process; samples/s and MiB\n{sc.HEADER}",
        flush=True,
    )
    rows, overhead = sc.selfcheck(
        frameworks, strategies, args.size, args.batch,
        on_row=lambda row: print(sc.format_row(row), flush=True),
    )  # fmt: skip
    for framework, result in overhead.items():
        print(sc.format_overhead(framework, result))
    if args.json or saved:
        report = sc.as_json(rows, overhead, args.size, args.batch, provenance)
        for path in filter(None, [args.json, saved]):
            write_json_atomic(path, report)
            print(f"written: {path}")
    return 0
