"""The table of records printed after a run (terminal) and its plain-text twin."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from rich import box
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


ANSWER_WIDTH = 120  # the terminal the main job's ending fits (at most ANSWER_LINES lines)
ANSWER_LINES = 40


def answer_rows(results_dir: Path, machine: str, preset: str, runs: Iterable[str]) -> list[dict]:
    """Per workload, budget and framework of this run's capacity folders: the baseline's
    largest batch, the fastest training strategy's and the largest training batch's (each
    with samples/s there), and the largest inference batch; as analysis.decision's tables
    have them."""
    from analysis.decision import decision_table
    from analysis.decision_terms import BEST, INFERENCE, LARGEST, PART, SPEED, budget_label
    from analysis.page_parts import load_results

    results = load_results(results_dir)
    capacity = results.capacity
    if capacity.empty:
        return []
    capacity = capacity[(capacity["machine"] == machine) & capacity["run"].isin(list(runs))]
    rows = []
    for key, table in decision_table(results.view, capacity, results.probes).items():
        if key[2] != preset:
            continue
        for framework, part in table.groupby("framework", sort=True):
            ok = part[part[LARGEST].notna() & (part[LARGEST].fillna(0) > 0)]
            train, infer = ok[ok[PART] != INFERENCE], ok[ok[PART] == INFERENCE]
            base = train[train["strategy"] == "baseline"]
            best = train[train[BEST] == "best"]
            rows.append({
                "workload": f"{key[1]} {budget_label(key[3])}", "framework": framework,
                "baseline": _said(base.iloc[0], LARGEST, SPEED, name=False) if len(base) else "-",
                "fastest training": _said(best.iloc[0], LARGEST, SPEED) if len(best) else "-",
                "largest training": _said(
                    train.loc[train[LARGEST].astype(float).idxmax()], LARGEST, SPEED)
                if len(train) else "-",
                "largest inference": _said(  # its speed on the page: the width is spent
                    infer.loc[infer[LARGEST].astype(float).idxmax()], LARGEST, None)
                if len(infer) else "-",
            })  # fmt: skip
    return rows


def _said(row: object, largest: str, speed: str | None, name: bool = True) -> str:
    """A row as "amp-bf16 24 @ 8.21/s": its's strategy, largest batch and samples/s there."""
    from analysis.decision_text import speed_figure

    batch = int(row[largest])  # type: ignore[index]
    value = row[speed] if speed else math.nan  # type: ignore[index]
    at = f" @ {speed_figure(value)}" if value == value else ""  # NaN: a busy host's
    return f"{row['strategy'] + ' ' if name else ''}{batch}{at}"  # type: ignore[index]


def print_answers(
    results_dir: Path, machine: str, preset: str, runs: Iterable[str], page: Path, report: Path
) -> None:
    """The main job's ending, one screen: the answers (answer_rows) and where the rest is
    (the machine's results page and the HTML report)."""
    rows = answer_rows(results_dir, machine, preset, runs)
    console = Console(width=ANSWER_WIDTH)
    if rows:
        t = Table(
            title=f"What fits, preset {preset} on {machine}: largest batch @ samples/s there",
            title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
            padding=(0, 1, 0, 0),
        )  # fmt: skip
        for column in rows[0]:  # each as wide as its widest entry: nothing cut
            width = max(len(column), *(len(row[column]) for row in rows))
            t.add_column(column, no_wrap=True, min_width=width)
        last = None
        for row in rows:
            shown = dict(row)
            if row["workload"] == last:
                shown["workload"] = ""
            last = row["workload"]
            t.add_row(*shown.values())
        console.print(t)
    console.print("Every strategy with its margin, noise and notes, and the pictures:")
    console.print(f"  page: {page}", soft_wrap=True)
    console.print(f"  HTML report: {report}", soft_wrap=True)
