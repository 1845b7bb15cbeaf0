"""membench list: workloads, strategies, presets (with what each leaves to another) and
frameworks; with --matrix, the framework x strategy support the backends declare."""

from __future__ import annotations

import argparse

from rich.table import Table

from membench import registry
from membench.commands.parsing import console, fail


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="workloads, strategies, presets, frameworks")
    p.add_argument(
        "--matrix", action="store_true", help="framework x strategy support, from the backends"
    )
    p.add_argument("--markdown", action="store_true", help="with --matrix: as a Markdown table")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.markdown and not args.matrix:  # the tables below have no Markdown form
        return fail("--markdown applies to --matrix only: give both", "membench list")
    if args.matrix:
        return print_matrix(args.markdown)
    for table in (workloads(), strategies(), presets(), left_out(), frameworks()):
        console.print(table)
    return 0


def _table(title: str, *headers: str, fold: bool = False, **options) -> Table:
    t = Table(title=title, **options)
    for h in headers:
        t.add_column(h, overflow="fold" if fold else "ellipsis")
    return t


def workloads() -> Table:
    t = _table("workloads", "name", "description", "frameworks with a model")
    for w in registry.WORKLOADS.values():
        t.add_row(w.name, w.description, ", ".join(w.model_modules))
    return t


def strategies() -> Table:
    from membench.publish.support_matrix import changed_knobs

    # one column per knob no longer fits a terminal: the knobs each strategy changes
    t = _table("strategies", "name", "description", "knobs (changed from the baseline)")
    for s in registry.STRATEGIES.values():
        knobs = ", ".join(f"{k}={v}" for k, v in changed_knobs(s).items()) or "(baseline)"
        t.add_row(s.name, s.description, knobs)
    return t


def presets() -> Table:
    from membench.environment import default_preset

    t = _table(
        f"presets (default here: {default_preset()})",
        "name", "description", "workload", "inputs", "batch sizes",
    )  # fmt: skip
    for p in registry.PRESETS.values():
        for w, size in p.sizes.items():
            t.add_row(p.name, p.description, w, str(size.inputs), str(list(size.batch_sizes)))
    return t


def left_out() -> Table:
    t = _table(
        "cells a preset leaves to another (minutes each where it promises seconds)",
        "preset", "frameworks", "workloads", "strategies", "why",
    )  # fmt: skip
    for p in registry.PRESETS.values():
        for rule in p.left_out + p.capacity_left_out:
            names = [
                ", ".join(n) or "all" for n in (rule.frameworks, rule.workloads, rule.strategies)
            ]
            search = " (capacity search only)" if rule in p.capacity_left_out else ""
            t.add_row(p.name, *names, rule.reason + search)
    return t


def frameworks() -> Table:
    from membench.environment import machine_name

    t = _table(f"frameworks (machine: {machine_name()})", "name", "description", "installed here")
    for f in registry.FRAMEWORKS.values():
        t.add_row(f.name, f.description, "yes" if registry.framework_installed(f.name) else "no")
    return t


def print_matrix(markdown: bool) -> int:
    """The framework x strategy table from the backends' declared support."""
    from membench.publish import support_matrix

    if markdown:
        print(support_matrix.markdown(), end="")
        return 0
    names = list(registry.FRAMEWORKS)
    t = _table(
        "strategy support (declared by each backend)", "strategy", "knobs", *names,
        fold=True, show_lines=True,
    )  # fmt: skip
    for row in support_matrix.matrix(names):
        t.add_row(row["strategy"], row["knobs"], *(row[f] for f in names))
    console.print(t)
    return 0
