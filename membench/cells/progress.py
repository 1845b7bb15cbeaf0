"""Cells measured with progress: the remaining time as they finish, what is in flight, a
busy host's cells measured once more (and then marked or kept out)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from membench.cells import supervision
from membench.cells.engines import Engine, LocalEngine, node_label
from membench.cells.estimate import Forecast, forecast, minutes
from membench.environment import (
    machine_name,
)
from membench.metrics import BUSY_SHARE, busy_share, kept_out_as_busy
from membench.records import Cell, Record, RecordStore
from membench.records import allow_busy as allow_busy_record

console = Console(stderr=True)


def run_with_progress(
    cells: Sequence[Cell],
    store: RecordStore,
    control: supervision.RunControl = supervision.DEFAULT_CONTROL,
    engine: Engine | None = None,
    busy_rule: bool = False,
    allow_busy: bool = False,
) -> supervision.RunResult:
    """The engine's run (default: local) with its time estimate first, then a progress bar
    with the remaining estimate (corrected as cells finish) and one line per finished cell;
    engines that measure several cells at once show them and their nodes, and a cell they
    resubmit (its node lost) as they resubmit it. A cell measured on a busy host
    (metrics.BUSY_SHARE) is flagged as it finishes; with busy_rule (membench bench) it is
    measured once more at the end, and one still busy then is marked and kept where
    allow_busy, else left out of asv and the tables' speed figures (its record keeps the
    share). The progress display sets control's callbacks."""
    second_try = False
    engine = engine or LocalEngine()
    plan = forecast(
        cells, store, machine_name(), control.fresh, control.retry_failed, control.timeout,
        supervision.resume_cap(control, engine.name),
    )  # fmt: skip
    print_forecast(plan)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("about {task.fields[left]} left"),
        console=console,
    ) as progress:
        task = progress.add_task("cells", total=len(cells), left=minutes(plan.remaining_seconds()))

        def on_start(cell: Cell, index: int, total: int) -> None:
            progress.update(task, description=f"measuring {cell.key}")

        def on_done(record: Record, reused: bool) -> None:
            origin = "kept from earlier run" if reused else f"{record.wall_seconds:.0f} s"
            if not reused and (node := record.environment.get("placement", {}).get("node")):
                origin += f" on {node_label(node)}"
            reason = f" - {record.reason[:100]}" if record.reason else ""
            progress.console.print(
                f"{record.cell.key}: [bold]{record.status}[/bold] ({origin}){reason}"
            )
            if record.status == "ok" and kept_out_as_busy(record.metrics, record.environment):
                then = (
                    "its second try"
                    if second_try
                    else "measured again at the end of the run"
                    if busy_rule
                    else "its speed is left out of the tables"
                )
                progress.console.print(
                    f"  [yellow]busy host: other processes used "
                    f"{busy_share(record.metrics):.0%} of the CPU (above {BUSY_SHARE:.0%}); "
                    f"{then}[/yellow]"
                )
            plan.done(record, reused)
            progress.update(task, advance=1, left=minutes(plan.remaining_seconds()))

        def on_flight(flying: Mapping[Cell, str]) -> None:
            progress.update(task, description=in_flight_text(flying))

        def on_retry(cell: Cell, why: str) -> None:
            progress.console.print(
                f"[yellow]{cell.key}: resubmitted to another node ({why})[/yellow]"
            )

        control = dataclasses.replace(
            control, on_start=on_start, on_done=on_done, on_flight=on_flight, on_retry=on_retry
        )
        try:
            result = engine.run(cells, store, control)
            busy = busy_cells(result.records) if busy_rule else []
            if busy:
                second_try = True
                progress.console.print(
                    f"[yellow]{len(busy)} cells measured on a busy host: measuring them once "
                    "more[/yellow]"
                )
                progress.update(task, total=len(cells) + len(busy))
                again = engine.run(busy, store, dataclasses.replace(control, fresh=True))
                redone = {r.cell: r for r in again.records}
                result.records = [redone.get(r.cell, r) for r in result.records]
                result.measured += again.measured
            if busy_rule:
                settle_busy(result.records, store, allow_busy, progress.console)
            return result
        except KeyboardInterrupt:
            progress.console.print(
                f"[yellow]interrupted: finished cells are kept in {store.root}; "
                "run the same command again to resume[/yellow]"
            )
            raise


def busy_cells(records: Sequence[Record]) -> list[Cell]:
    """Cells whose record is ok but measured on a busy host, and not recorded anyway."""
    return [
        r.cell for r in records if r.status == "ok" and kept_out_as_busy(r.metrics, r.environment)
    ]


def settle_busy(
    records: Sequence[Record], store: RecordStore, allow_busy: bool, out: Console
) -> None:
    """After the second measurement: mark the cells still busy as recorded anyway (allow_busy),
    else say they stay out of asv and the tables' speed figures."""
    still = [r for r in records if r.cell in set(busy_cells(records))]
    if not still:
        return
    keys = ", ".join(r.cell.key for r in still[:5]) + (" ..." if len(still) > 5 else "")
    if allow_busy:
        for record in still:
            allow_busy_record(record, store)
        out.print(
            f"[yellow]{len(still)} cells still measured on a busy host, recorded anyway and "
            f"marked (--allow-busy): {keys}[/yellow]"
        )
    else:
        out.print(
            f"[yellow]{len(still)} cells still measured on a busy host: kept out of asv and "
            f"of the tables' speed figures (their records keep the share); measure them on an "
            f"idle host, or record them anyway with --allow-busy: {keys}[/yellow]"
        )


def print_forecast(plan: Forecast, what: str = "cells") -> None:
    """The estimate per framework x workload, before any cell runs."""
    title = f"{what}: estimated {minutes(plan.total_seconds())} (membench/cells/estimate.py)"
    table = Table(title=title)
    for h in ["framework", "workload", what, "estimate", "from"]:
        table.add_column(h)
    for row in plan.rows():
        table.add_row(
            str(row["framework"]), str(row["workload"]), str(row["cells"]),
            minutes(float(row["minutes"]) * 60), str(row["basis"]),
        )  # fmt: skip
    console.print(table)


def in_flight_text(flying: Mapping[Cell, str]) -> str:
    """'3 in flight: nodeA x2, nodeB x1' ('none in flight' between and after cells)."""
    if not flying:
        return "none in flight"
    nodes = ", ".join(f"{node} x{n}" for node, n in sorted(Counter(flying.values()).items()))
    return f"{len(flying)} in flight: {nodes}"
