"""The table of records printed after a run (terminal) and its plain-text twin."""

from __future__ import annotations

from collections.abc import Iterable

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
