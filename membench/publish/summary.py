"""The table of records printed after a run (terminal) and its plain-text twin."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from membench.metrics import summary_columns
from membench.records import Record


def _cell_sort_key(r: Record) -> tuple:
    c = r.cell
    return (c.workload, c.framework, c.batch_size, c.strategy)


def table(records: Iterable[Record], title: str = "membench records") -> Table:
    records = sorted(records, key=_cell_sort_key)
    present = [m for m in summary_columns() if any(m.name in r.metrics for r in records)]
    t = Table(title=title, show_lines=False)
    for header in ["workload", "framework", "strategy", "batch", "status"]:
        t.add_column(header)
    for m in present:
        t.add_column(m.summary, justify="right")
    t.add_column("reason", overflow="fold", max_width=60)
    for r in records:
        c = r.cell
        values = [
            m.summary_format.format(r.metrics[m.name] / m.summary_scale)
            if m.name in r.metrics
            else "-"
            for m in present
        ]
        status = r.status if r.status == "ok" else f"[bold]{r.status}[/bold]"
        t.add_row(c.workload, c.framework, c.strategy, str(c.batch_size), status, *values, r.reason)
    return t


def print_table(records: Iterable[Record], title: str = "membench records") -> None:
    Console(width=200).print(table(records, title))


def print_decisions(results_dir: Path, machine: str, preset: str, runs: Iterable[str]) -> None:
    """The decision tables a bench ends with (analysis.decision's, as the results pages show
    them): per workload and budget of this run's capacity folders, each framework x strategy's
    largest batch, its samples/s there, and saving and slowdown against the baseline."""
    from analysis.decision import by_mode, decision_table, formatted, note, unsearched, where
    from analysis.results_page import load_results

    results = load_results(results_dir)
    capacity = results.capacity
    if capacity.empty:
        return
    capacity = capacity[(capacity["machine"] == machine) & capacity["run"].isin(list(runs))]
    console = Console(width=200)
    for key, frame in decision_table(results.view, capacity, results.probes).items():
        if key[2] != preset:
            continue
        for mode, part in by_mode(formatted(frame)).items():
            t = Table(title=f"{where(key)}: {mode}", title_justify="left")
            for column in part.columns:
                t.add_column(str(column), overflow="fold", max_width=60)
            for row in part.itertuples(index=False):
                t.add_row(*(str(v) for v in row))
            console.print(t)
        console.print(note(frame))
        if missing := unsearched(capacity, key):
            console.print(missing)
