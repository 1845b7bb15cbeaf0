"""Comparison tables per workload, device and preset, in Markdown and HTML.

Each table names its layer. A cell that did not run shows its status (oom, unsupported,
...), and the reasons are listed under the table.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from analysis.labels import for_people
from analysis.schema import (
    METRICS,
    MIB,
    PRIMARY_MEMORY,
    WORKLOAD_DEVICE_PRESET,
    device_kind,
    one_machine,
)

FRAMEWORK_STRATEGY = ["framework", "strategy"]  # a table's rows
REFERENCE_FRAMEWORK = "torch"
# Savings are shown for the layer that tells most per device, and on CPU also for what a step
# adds: that is where activation savings (checkpointing, precision) show on a host.
SAVINGS_METRICS = {
    "cpu": [PRIMARY_MEMORY["cpu"], "peak_host_rss_delta_bytes"],
    "gpu": [PRIMARY_MEMORY["gpu"], "peak_device_process_bytes"],
}


def _fmt(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / MIB:,.0f}"
    return f"{value:.3g}" if unit == "s" else f"{value:.2f}"


def _cell_text(row: pd.Series) -> str:
    if row["status"] != "ok":
        return row["status"]
    if pd.isna(row["value"]):
        return "-"
    return _fmt(row["value"], row["unit"])


def metric_table(group: pd.DataFrame, metric: str) -> pd.DataFrame:
    """framework x strategy rows, batch-size columns, a metric's value or the cell's status."""
    rows = group[group["metric"] == metric].copy()
    rows["text"] = rows.apply(_cell_text, axis=1)
    table = rows.pivot_table(
        index=FRAMEWORK_STRATEGY, columns="batch_size", values="text", aggfunc="first"
    )
    # A cell that did not run has rows only for the core metrics: show its status here too.
    statuses = group.drop_duplicates(FRAMEWORK_STRATEGY + ["batch_size"]).pivot_table(
        index=FRAMEWORK_STRATEGY, columns="batch_size", values="status", aggfunc="first"
    )
    table = table.reindex(index=statuses.index, columns=statuses.columns)
    table = table.fillna(statuses.where(statuses != "ok"))
    table.columns = [f"batch {b}" for b in table.columns]
    table = table.fillna("-")
    # a framework x strategy refused at every batch it was given is in the support matrix, once
    refused = ((table == "unsupported") | (table == "-")).all(axis=1)
    return table[~(refused & (table == "unsupported").any(axis=1))]


def change_vs_baseline(group: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Long table (framework, strategy, batch_size, change_pct): a metric's change in %
    against the same framework's baseline at the same batch; baseline rows included (0%)."""
    rows = group[(group["metric"] == metric) & (group["status"] == "ok")]
    cells = rows[FRAMEWORK_STRATEGY + ["batch_size", "value"]].dropna()
    base = cells[cells["strategy"] == "baseline"].drop(columns="strategy")
    merged = cells.merge(base, on=["framework", "batch_size"], suffixes=("", "_base"))
    merged["change_pct"] = (merged["value"] / merged["value_base"] - 1) * 100
    return merged[FRAMEWORK_STRATEGY + ["batch_size", "change_pct"]]


def savings_table(group: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Change of a metric against the same framework's baseline at the same batch, in %."""
    change = change_vs_baseline(group, metric)
    if change.empty:
        return pd.DataFrame()
    table = change.pivot_table(index=FRAMEWORK_STRATEGY, columns="batch_size", values="change_pct")
    table.columns = [f"batch {b}" for b in table.columns]
    return table.map(lambda v: "-" if pd.isna(v) else f"{v:+.0f}%")


def framework_table(group: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Each framework's metric over the reference framework's at the same strategy and batch."""
    rows = group[(group["metric"] == metric) & (group["status"] == "ok")]
    values = rows.pivot_table(
        index=["strategy", "batch_size"], columns="framework", values="value", aggfunc="first"
    )
    if REFERENCE_FRAMEWORK not in values.columns or values.shape[1] < 2:
        return pd.DataFrame()
    ratios = values.div(values[REFERENCE_FRAMEWORK], axis=0).drop(columns=REFERENCE_FRAMEWORK)
    # each column says what it divides; a list drops the columns' name ("framework"), which
    # to_html would otherwise print as a header over an empty column
    ratios.columns = [f"{f} / {REFERENCE_FRAMEWORK}" for f in ratios.columns]
    return ratios.map(lambda v: "-" if pd.isna(v) else f"{v:.2f}x")


def reasons(group: pd.DataFrame) -> list[str]:
    """One line per cell that did not end ok."""
    bad = group[group["status"] != "ok"].drop_duplicates(FRAMEWORK_STRATEGY + ["batch_size"])
    return [
        f"{r.framework} {r.strategy} batch {r.batch_size}: {r.status}: {r.reason}"
        for r in bad.itertuples()
    ]


def _memory_metrics(group: pd.DataFrame) -> list[str]:
    present = set(group.loc[group["status"] == "ok", "metric"])
    return [m for m, spec in METRICS.items() if spec.unit == "bytes" and m in present]


def tables(frame: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame, list[str]]]:
    """(title, table, notes) for each workload/device/preset: memory per layer, speed,
    savings against baseline, framework against framework. The reasons of cells that did
    not run come once per group, with its first table. One machine's rows (one_machine)."""
    one_machine(frame)
    for (workload, device, preset), group in frame.groupby(WORKLOAD_DEVICE_PRESET, sort=True):
        where = f"{workload} on {device} (preset {preset})"
        notes = reasons(group)
        for metric in _memory_metrics(group):
            spec = METRICS[metric]
            yield (
                f"{where}: {spec.label} [{spec.layer} layer], MiB",
                metric_table(group, metric),
                notes,
            )
            notes = []
        for metric in ["throughput_samples_per_second", "step_seconds_median"]:
            spec = METRICS[metric]
            yield f"{where}: {spec.label}, {spec.unit}", metric_table(group, metric), notes
            notes = []
        kind = device_kind(device)
        for metric in SAVINGS_METRICS[kind]:
            spec = METRICS[metric]
            savings = savings_table(group, metric)
            if not savings.empty:
                title = (
                    f"{where}: {spec.label} [{spec.layer} layer] against each framework's baseline"
                )
                yield title, savings, []
        spec = METRICS[PRIMARY_MEMORY[kind]]
        versus = framework_table(group, PRIMARY_MEMORY[kind])
        if not versus.empty:
            title = f"{where}: {spec.label} [{spec.layer} layer], framework / {REFERENCE_FRAMEWORK}"
            yield title, versus, []


def _notes_md(notes: list[str]) -> str:
    return "".join(f"\n- {n}" for n in notes)


def comparison_tables(frame: pd.DataFrame) -> dict[str, str]:
    """title -> Markdown table (with the reasons of cells that did not run)."""
    return {
        title: for_people(table.reset_index()).to_markdown(index=False) + ("\n" + _notes_md(notes))
        for title, table, notes in tables(frame)
    }


def comparison_tables_html(frame: pd.DataFrame) -> dict[str, str]:
    """title -> HTML table. The reasons are not repeated here: the report lists every cell
    that did not run, with its status and reason, in a table of its own."""
    return {
        title: for_people(table.reset_index()).to_html(index=False, classes="results", border=0)
        for title, table, _ in tables(frame)
    }
