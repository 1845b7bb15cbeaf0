"""membench compare: the change per benchmark between two versions, environments or commits;
exit 1 on a regression, 3 if record files could not be read."""

from __future__ import annotations

import argparse
import sys

from rich.table import Table

from membench import argtypes, paths, registry
from membench.commands.parsing import console, fail
from membench.commands.selection import add_batch, add_names

# compare's exit status when some record files could not be read (1: a regression, 2: input)
INCOMPLETE = 3
SPEED_APART_TEXT = (
    "{} cells' speed not judged: the two sides were measured in different runs (speeds compare "
    "only within one sweep, versions interleaved on one host)"
)
COLOUR = {"regression": "red", "improvement": "green", "unchanged": "white", "busy host": "yellow"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="change per benchmark between two versions, environments or commits; "
        "exit 1 on a regression, 3 if record files could not be read",
    )
    p.add_argument("base", help="environment (default, jax-0.10.2), version (jax-0.7.1) or commit")
    p.add_argument("new", help="the same kinds as base")
    add_names(p, "workload", "strategy")
    add_batch(p, "all")
    p.add_argument(
        "--metric",
        type=argtypes.metric_names,
        help="metrics (default: memory, throughput, XLA temp)",
    )
    p.add_argument(
        "--threshold", type=argtypes.fraction(low_inclusive=False), default=0.05,
        help="smallest relative change that counts, raised to the measured spread (default 0.05)",
    )  # fmt: skip
    p.add_argument("--all", action="store_true", help="also list unchanged benchmarks")
    p.add_argument(
        "--results", type=argtypes.results_dir, default=paths.RESULTS, help="results folder"
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from analysis.compare import (
        SPEED_APART,
        SideError,
        compare,
        nothing_shared,
        pooled_runs,
        regressions,
        resolve_side,
    )
    from analysis.loader import load

    if args.base == args.new:
        return fail(f"base and new are both {args.base!r}: nothing to compare", "membench compare")
    for name in args.workload or []:  # a misspelt name is said so, not "no results for" a side
        registry.workload(name)
    for name in args.strategy or []:
        registry.strategy(name)
    loaded = load(args.results)
    for problem in loaded.problems:
        console.print(f"[yellow]{problem}[/yellow]")
    frame = loaded.frame
    for column, wanted in [
        ("workload", args.workload), ("strategy", args.strategy), ("batch_size", args.batch)
    ]:  # fmt: skip
        if wanted:
            frame = frame[frame[column].isin(wanted)]
    try:
        base, new = resolve_side(frame, args.base), resolve_side(frame, args.new)
    except SideError as exc:
        return fail(str(exc), "membench compare")
    table = compare(base, new, args.metric, args.threshold)
    if table.empty:
        apart = table.attrs.get(SPEED_APART, 0)
        console.print(SPEED_APART_TEXT.format(apart) if apart else nothing_shared(base, new))
        return 2
    print_changes(table if args.all else table[table["verdict"] != "unchanged"], base, new)
    counts = table["verdict"].value_counts()
    console.print(
        f"{counts.get('regression', 0)} regressions, {counts.get('improvement', 0)} "
        f"improvements, {counts.get('unchanged', 0)} unchanged (within threshold), "
        f"{counts.get('busy host', 0)} speed changes not judged (other work on the host)"
    )
    if apart := table.attrs.get(SPEED_APART, 0):
        console.print(SPEED_APART_TEXT.format(apart))
    if pooled := pooled_runs(base, new):
        console.print(pooled)
    if unreadable := len(loaded.unreadable):  # a comparison missing records is no verdict
        print(
            f"membench compare: {unreadable} record files could not be read (listed above: "
            f"corrupt, not records, or non-finite metrics); exit {INCOMPLETE}",
            file=sys.stderr,
        )
        return INCOMPLETE
    return 1 if regressions(table) else 0


def print_changes(shown, base, new) -> None:
    """One row per benchmark and metric: both values, the change, its threshold, verdict."""
    from analysis.compare import format_value
    from membench.metrics import change_floor
    from membench.metrics import metric as catalogue_entry

    # where the rows come from: a column where they come from several machines or presets,
    # else in the title
    places = [c for c in ["machine", "preset"] if c in shown and shown[c].nunique() > 1]
    where = [
        str(shown[c].iloc[0]) for c in ["machine", "preset"]
        if c in shown and c not in places and len(shown)
    ]  # fmt: skip
    on = f" on {' '.join(where)}" if where else ""
    t = Table(title=f"{base.text} ({base.kind}) -> {new.text} ({new.kind}){on}")
    keys = places + [c for c in ["workload", "framework", "strategy", "batch_size"] if c in shown]
    for h in [*keys, "metric", "base", "new", "change", "threshold", "verdict", "note"]:
        t.add_column(h, overflow="fold")
    for r in shown.to_dict("records"):
        metric = r["metric"]
        change, threshold, label = "", "", "status"
        if metric != "status":
            change = f"{r['change']:+.1%}"
            threshold = f"{r['threshold']:.1%}, {format_value(metric, change_floor(metric))}"
            label = catalogue_entry(metric).label
        t.add_row(
            *(str(r[k]) for k in keys), label,
            format_value(metric, r["base"]), format_value(metric, r["new"]),
            change, threshold, f"[{COLOUR[r['verdict']]}]{r['verdict']}[/]", str(r["note"])[:60],
        )  # fmt: skip
    console.print(t)
