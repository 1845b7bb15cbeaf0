"""membench command line: list, run, bench, show."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from membench import registry, runner
from membench.environment import REPO_ROOT
from membench.records import CorruptRecordError, RecordStore
from membench.summary import print_table

console = Console(width=160)


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _ints(text: str) -> list[int]:
    try:
        return [int(n) for n in _names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"batch sizes must be integers, got {text!r}") from None


def cmd_list(args: argparse.Namespace) -> int:
    from membench.environment import default_preset, machine_name

    t = Table(title="workloads")
    t.add_column("name")
    t.add_column("description")
    t.add_column("frameworks with a model")
    for w in registry.WORKLOADS.values():
        t.add_row(w.name, w.description, ", ".join(w.model_modules))
    console.print(t)

    t = Table(title="strategies")
    for h in [
        "name",
        "description",
        "precision",
        "checkpoint",
        "accumulate",
        "mode",
        "compile",
        "allocator",
        "attention",
    ]:
        t.add_column(h)
    for s in registry.STRATEGIES.values():
        k = s.knobs()
        t.add_row(s.name, s.description, *(str(k[h]) for h in list(k)))
    console.print(t)

    t = Table(title=f"presets (default here: {default_preset()})")
    for h in ["name", "description", "workload", "inputs", "batch sizes"]:
        t.add_column(h)
    for p in registry.PRESETS.values():
        for w, size in p.sizes.items():
            t.add_row(p.name, p.description, w, str(size.inputs), str(list(size.batch_sizes)))
    console.print(t)

    t = Table(title=f"frameworks (machine: {machine_name()})")
    for h in ["name", "description", "installed here"]:
        t.add_column(h)
    for f in registry.FRAMEWORKS.values():
        t.add_row(f.name, f.description, "yes" if registry.framework_installed(f.name) else "no")
    console.print(t)
    return 0


def _selection(args: argparse.Namespace) -> dict[str, list]:
    return {
        "workloads": args.workload or list(registry.WORKLOADS),
        "frameworks": args.framework
        or [f for f in registry.FRAMEWORKS if registry.framework_installed(f)],
        "strategies": args.strategy or list(registry.STRATEGIES),
        "batch_sizes": args.batch or [],
    }


def _plan(args: argparse.Namespace, preset: str):
    sel = _selection(args)
    cells = runner.plan(
        sel["workloads"], sel["frameworks"], sel["strategies"], preset, sel["batch_sizes"]
    )
    return sel, cells


def cmd_run(args: argparse.Namespace) -> int:
    from membench.bench import run_with_progress
    from membench.environment import default_preset, machine_name

    preset = registry.preset(args.preset or default_preset()).name
    _, cells = _plan(args, preset)
    store = RecordStore(args.store or Path(".membench") / "records" / machine_name() / preset)
    console.print(f"{len(cells)} cells, preset {preset}, records in {store.root}")
    result = run_with_progress(cells, store, args.timeout, args.fresh, not args.keep_failed)
    print_table(result.records, f"membench run: preset {preset} ({store.root})")
    console.print(f"measured {result.measured}, kept from an earlier run {result.reused}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from membench.asv_suite import default_store
    from membench.bench import asv_env, results_dir, run_asv, run_with_progress
    from membench.environment import default_preset

    preset = registry.preset(args.preset or default_preset()).name
    sel, cells = _plan(args, preset)
    store = RecordStore(args.store or default_store(preset))
    console.print(f"{len(cells)} cells, preset {preset}, records in {store.root}")
    result = run_with_progress(cells, store, args.timeout, args.fresh, not args.keep_failed)
    rc = run_asv(asv_env(preset, store, sel))
    print_table(result.records, f"membench bench: preset {preset}")
    console.print(f"asv results: {results_dir()}; records: {store.root}")
    return rc


def cmd_show(args: argparse.Namespace) -> int:
    store = RecordStore(args.store)
    try:
        records = list(store.records())
    except CorruptRecordError as exc:
        console.print(f"[red]{exc}[/red]")
        return 1
    if not records:
        console.print(f"no records in {store.root}")
        return 1
    print_table(records, f"records in {store.root}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from analysis.report import write_report

    index = write_report(args.results, args.out)
    console.print(f"report: {index}")
    return 0


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("-w", "--workload", type=_names, help="comma-separated (default: all)")
    p.add_argument("-f", "--framework", type=_names, help="comma-separated (default: installed)")
    p.add_argument("-s", "--strategy", type=_names, help="comma-separated (default: all)")
    p.add_argument("-b", "--batch", type=_ints, help="batch sizes (default: the preset's grid)")
    p.add_argument("-p", "--preset", help="smoke, cpu or gpu (default: from the device)")
    p.add_argument("--store", type=Path, help="record directory")
    p.add_argument("--timeout", type=float, help="seconds per cell (default: the preset's)")
    p.add_argument("--fresh", action="store_true", help="re-measure cells already stored")
    p.add_argument(
        "--keep-failed", action="store_true", help="do not retry stored timeout/error cells"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="membench", description="Memory and speed of deep-learning frameworks."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="workloads, strategies, presets, frameworks").set_defaults(
        func=cmd_list
    )
    p = sub.add_parser("run", help="measure cells and print their records")
    _add_selection(p)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("bench", help="the main job: measure, record with asv, summarise")
    _add_selection(p)
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("report", help="HTML page, Markdown tables, plots and data exports")
    p.add_argument("--out", type=Path, required=True, help="directory to write the report to")
    p.add_argument("--results", type=Path, default=REPO_ROOT / "results", help="results folder")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("show", help="print the records of a store")
    p.add_argument("store", type=Path)
    p.set_defaults(func=cmd_show)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except registry.UnknownNameError as exc:
        print(f"membench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
