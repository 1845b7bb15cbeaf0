"""The table of records printed after a run (terminal) and its plain-text twin."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.table import Table

from membench.records import Record

MIB = 2**20

# (header, metric, scale, format): memory columns name their layer.
COLUMNS = [
    ("host peak RSS MiB", "peak_host_rss_bytes", MIB, "{:.0f}"),
    ("host Δ MiB", "peak_host_rss_delta_bytes", MIB, "{:.1f}"),
    ("dev alloc peak MiB", "peak_device_allocated_bytes", MIB, "{:.0f}"),
    ("dev reserved peak MiB", "peak_device_reserved_bytes", MIB, "{:.0f}"),
    ("NVML process peak MiB", "peak_device_process_bytes", MIB, "{:.0f}"),
    ("samples/s", "throughput_samples_per_second", 1, "{:.2f}"),
    ("step s (median)", "step_seconds_median", 1, "{:.3f}"),
    ("first step s", "first_step_seconds", 1, "{:.2f}"),
]


def _cell_sort_key(r: Record) -> tuple:
    c = r.cell
    return (c.workload, c.framework, c.batch_size, c.strategy)


def table(records: Iterable[Record], title: str = "membench records") -> Table:
    records = sorted(records, key=_cell_sort_key)
    present = [c for c in COLUMNS if any(c[1] in r.metrics for r in records)]
    t = Table(title=title, show_lines=False)
    for header in ["workload", "framework", "strategy", "batch", "status"]:
        t.add_column(header)
    for header, *_ in present:
        t.add_column(header, justify="right")
    t.add_column("reason", overflow="fold", max_width=60)
    for r in records:
        c = r.cell
        values = [
            fmt.format(r.metrics[key] / scale) if key in r.metrics else "-"
            for _, key, scale, fmt in present
        ]
        status = r.status if r.status == "ok" else f"[bold]{r.status}[/bold]"
        t.add_row(c.workload, c.framework, c.strategy, str(c.batch_size), status, *values, r.reason)
    return t


def print_table(records: Iterable[Record], title: str = "membench records") -> None:
    Console(width=200).print(table(records, title))
