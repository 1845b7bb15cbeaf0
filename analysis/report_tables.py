"""The tables of the report, which the results pages show too: the results by machine and
section, the overview of what was measured, run and search times, the cells that did not run,
the fairness checks, the memory sections (decision tables, capacity) and tables.md's Markdown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import pandas as pd

from analysis.claims import RULE
from analysis.decision_terms import (
    CAPACITY_TITLE,
    CURVE_TITLE,
    DecisionKey,
    latest_searches,
    where_on,
)
from analysis.decision_text import by_mode, formatted, notes_once
from analysis.fits import memory_fits, prediction_errors, sharded_model_state
from analysis.plots import GroupKey, groups, where
from analysis.schema import FRAMEWORK_STRATEGY_BATCH
from analysis.search_digest import capacity_curve, capacity_reference, table_note
from analysis.tables import comparison_tables
from membench.metrics import CELL_WALL

# One machine's workload/device/preset group: speeds of two host kinds never share a table.
Section = tuple[str, GroupKey]


def machine_order(decisions: Iterable[DecisionKey]) -> list[str]:
    """The machines in the order the decision tables come (lead_first's)."""
    return list(dict.fromkeys(key[0] for key in decisions))


def by_machine(
    frame: pd.DataFrame, first: Iterable[str] = ()
) -> Iterator[tuple[str, pd.DataFrame]]:
    """Each machine's rows: the machines in `first` (the decision tables' order) before the
    others, sorted."""
    if frame.empty:
        return
    present = sorted(frame["machine"].unique())
    leading = [m for m in dict.fromkeys(first) if m in present]
    for machine in leading + [m for m in present if m not in leading]:
        yield machine, frame[frame["machine"] == machine]


def sections(
    view: pd.DataFrame, first: Iterable[str] = ()
) -> Iterator[tuple[Section, pd.DataFrame]]:
    """Each machine's workload/device/preset groups, the machines as by_machine orders them."""
    for machine, rows in by_machine(view, first):
        for key, group in groups(rows):
            yield (machine, key), group


def section_title(section: Section) -> str:
    """The section's heading: where (workload, device, preset), on which machine."""
    machine, key = section
    return f"{where(key)}, on {machine}"


def cells(view: pd.DataFrame) -> pd.DataFrame:
    """One row per cell of the latest view (its status, reason and environment)."""
    keys = ["machine", "workload", "device", "preset", *FRAMEWORK_STRATEGY_BATCH]
    return view.drop_duplicates(keys)[
        [
            *keys,
            "framework_version",
            "host_cpu",
            "inputs",
            "commit",
            "started_at",
            "status",
            "reason",
        ]
    ]


def _versions(cells_frame: pd.DataFrame) -> str:
    """Each framework with its versions; cells refused before import record none."""
    out = []
    for framework, versions in cells_frame.groupby("framework", sort=True)["framework_version"]:
        known = sorted(v for v in versions.dropna().unique() if v)
        out.append(f"{framework} {' / '.join(known)}".strip())
    return ", ".join(out)


def overview(view: pd.DataFrame) -> pd.DataFrame:
    """Per machine and workload/device/preset: where, with what, and how many cells ended
    how."""
    rows = []
    keys = ["machine", "workload", "device", "preset"]
    for key, group in cells(view).groupby(keys, sort=True):
        statuses = group["status"].value_counts()
        rows.append({
            "workload": key[1], "device": key[2], "preset": key[3], "machine": key[0],
            "host CPU": ", ".join(
                sorted(c for c in group["host_cpu"].unique() if isinstance(c, str) and c)
            ),
            "inputs": "; ".join(sorted(i for i in group["inputs"].dropna().unique() if i)),
            "frameworks": _versions(group),
            "commit": ", ".join(sorted(c[:12] for c in group["commit"].unique() if c)),
            "measured": ", ".join(sorted(group["started_at"].str[:10].unique())),
            "cells": ", ".join(f"{n} {s}" for s, n in statuses.items()),
        })  # fmt: skip
    return pd.DataFrame(rows)


def run_time(view: pd.DataFrame) -> pd.DataFrame:
    """Minutes the latest record of each cell took, summed per preset, workload and
    framework (cells refused at plan time count their milliseconds): what measuring the
    preset again costs on that machine, one cell after another."""
    walls = view[view["metric"] == CELL_WALL].dropna(subset=["value"])
    if walls.empty:
        return pd.DataFrame()
    keys = ["preset", "workload", "framework"]
    table = walls.groupby(keys, sort=True)["value"].agg(cells="size", minutes="sum")
    table["minutes"] = table["minutes"] / 60
    parts = []
    for preset, rows in table.groupby(level="preset", sort=True):
        total = rows.sum().to_frame().T.assign(preset=preset, workload="all", framework="all")
        parts += [rows.reset_index(), total]
    return (
        pd.concat(parts, ignore_index=True)[[*keys, "cells", "minutes"]]
        .astype({"cells": int})
        .round({"minutes": 1})
    )


def run_time_summary(view: pd.DataFrame, searched: pd.DataFrame | None = None) -> pd.DataFrame:
    """run_time in one row per preset and workload: cells, minutes per framework, their cell
    minutes, and beside them search_time's probes and minutes where given (a preset with
    searches and no cells has a row too); each preset's total last."""
    walls = view[view["metric"] == CELL_WALL].dropna(subset=["value"])
    searching = [] if searched is None or searched.empty else list(searched.columns[2:])
    if walls.empty and not searching:
        return pd.DataFrame()
    keys = ["preset", "workload"]
    if len(walls):
        minutes = walls.pivot_table(index=keys, columns="framework", values="value", aggfunc="sum")
        minutes = minutes / 60
        minutes.columns = [f"{f} minutes" for f in minutes.columns]
        table = minutes.assign(
            cells=walls.groupby(keys).size(), **{"cell minutes": minutes.sum(axis=1, min_count=1)}
        ).reset_index()
    else:
        minutes = pd.DataFrame()
        table = pd.DataFrame({c: pd.Series(dtype=object if c in keys else float)
                              for c in [*keys, "cells", "cell minutes"]})  # fmt: skip
    if searching:
        table = table.merge(searched, on=keys, how="outer")
    parts = []
    for preset, rows in table.groupby("preset", sort=True):
        total = rows.drop(columns=keys).sum(min_count=1).to_frame().T
        parts += [rows, total.assign(preset=preset, workload="all")]
    out = pd.concat(parts, ignore_index=True)
    out = out[[*keys, "cells", *minutes.columns, "cell minutes", *searching]]
    out["cells"] = out["cells"].fillna(0)
    if searching:
        out["search probes"] = out["search probes"].astype("Int64")
    return out.astype({"cells": int}).round(1)


def search_time(
    walls: pd.DataFrame, capacity: pd.DataFrame, machine: str | None = None
) -> pd.DataFrame:
    """Per preset and workload, the probes of the searches the decision tables show
    (latest_searches: one run per search), their boundary repeats and warm-up cells counted
    (analysis.capacity_loader.load_search_walls), and the minutes they took one after another: what
    searching again costs here (an earlier run's probes of a search are not counted).
    machine: one machine's (the results page's and the report's table), else every one."""
    columns = ["preset", "workload", "search probes", "search minutes"]
    if walls is None or walls.empty or capacity.empty:
        return pd.DataFrame(columns=columns)
    if machine is not None:
        walls, capacity = (
            walls[walls["machine"] == machine],
            capacity[capacity["machine"] == machine],
        )
        if walls.empty or capacity.empty:
            return pd.DataFrame(columns=columns)
    keys = ["machine", "run", "workload", "framework", "strategy"]
    shown = latest_searches(capacity)[keys].drop_duplicates()
    walls = walls.merge(shown, on=keys, how="inner")
    table = walls.groupby(["preset", "workload"])["seconds"].agg(["size", "sum"]).reset_index()
    table.columns = columns
    table["search minutes"] = table["search minutes"] / 60
    return table


def not_run(group: pd.DataFrame) -> pd.DataFrame:
    """The cells of a group that did not end ok, with status and reason."""
    bad = cells(group)
    bad = bad[bad["status"] != "ok"].sort_values(FRAMEWORK_STRATEGY_BATCH)
    return bad[[*FRAMEWORK_STRATEGY_BATCH, "status", "reason"]].rename(
        columns={"batch_size": "batch"}
    )


def fairness_tables(selfcheck: pd.DataFrame, probe_cost: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The suite's cells against each framework's plain loop (throughput ratio, peaks) and
    the sampler thread's cost, per stored check (`membench selfcheck --save`)."""
    tables = {}
    for name, frame in (
        ("suite against the framework's own loop (ratio outside 0.9-1.1: our bug)", selfcheck),
        (
            "the samplers' cost per step: the worker's thread, then the runner's timeline "
            "(--timeline; target below 1%)",
            probe_cost,
        ),
    ):
        if len(frame):
            tables[name] = frame.drop(columns="machine").round(4)
    return tables


def memory_sections(
    view: pd.DataFrame,
    capacity: pd.DataFrame,
    probes: pd.DataFrame | None = None,
) -> dict[str, pd.DataFrame]:
    """The capacity, linear-fit and memory-model tables, each where there is data, rounded
    for reading."""
    sections = {}
    if not capacity.empty:
        sections[CAPACITY_TITLE] = capacity_reference(capacity)
        if len(curve := capacity_curve(capacity)):
            sections[CURVE_TITLE] = curve
    fits = memory_fits(view)
    if not fits.empty:
        sections["Peak memory against batch size (fixed + per-sample, MiB)"] = fits.round(3)
    sharded = sharded_model_state(view)
    if not sharded.empty:
        title = "Sharding: model state of the busiest rank, measured and predicted (MiB)"
        sections[title] = sharded.round(3)
    # the memory model is judged on every measured cell: the presets' and the capacity probes'
    parts = [f for f in (view, probes) if f is not None and len(f)]
    if len(parts) == 2:  # a column empty in one part takes its dtype from the other
        joined = pd.concat([f.dropna(axis=1, how="all") for f in parts], ignore_index=True)
        view = joined.reindex(columns=view.columns)
    elif parts:
        view = parts[0]
    errors = prediction_errors(view)
    if not errors.empty:
        title = "Memory model: predicted against measured peak, spec only and calibrated"
        sections[title] = errors.round(3)
    return sections


def per_machine(
    frame: pd.DataFrame,
    make: Callable[[pd.DataFrame], dict[str, pd.DataFrame]],
    first: Iterable[str] = (),
) -> dict[str, pd.DataFrame]:
    """make's tables of each machine's rows (by_machine's order), each title naming its
    machine, the empty ones left out: a figure pooled over host kinds is no one machine's."""
    named: dict[str, pd.DataFrame] = {}
    for machine, rows in by_machine(frame, first):
        named |= {f"{title}, on {machine}": t for title, t in make(rows).items() if len(t)}
    return named


def machines_fairness(selfcheck: pd.DataFrame, probe_cost: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """fairness_tables per machine, each title naming its machine."""
    stored = [f[["machine"]] for f in (selfcheck, probe_cost) if len(f)]
    named: dict[str, pd.DataFrame] = {}
    for machine, _ in by_machine(pd.concat(stored)) if stored else ():
        of = [f[f["machine"] == machine] if len(f) else f for f in (selfcheck, probe_cost)]
        named |= {f"{t}, on {machine}": table for t, table in fairness_tables(*of).items()}
    return named


def tables_markdown(
    view: pd.DataFrame,
    claims_frame: pd.DataFrame | None,
    history: dict[str, pd.DataFrame] | None = None,
    memory: dict[str, pd.DataFrame] | None = None,
    decisions: dict[DecisionKey, pd.DataFrame] | None = None,
) -> str:
    parts = ["# membench results", ""]
    decisions = decisions or {}
    for (key, table), told in zip(decisions.items(), notes_once(decisions.values()), strict=True):
        parts += [f"## Decision table: {where_on(key)}", "", told, ""]
        for mode, part in by_mode(formatted(table)).items():
            parts += [f"**{mode.capitalize()}**", "", part.to_markdown(index=False), ""]
    for section, group in sections(view, machine_order(decisions)):
        parts += [f"## {section_title(section)}", ""]
        for name, table in comparison_tables(group).items():
            parts += [f"### {name}", "", table, ""]
    for name, table in (memory or {}).items():
        told = table_note(name, table)
        note = [told, ""] if told else []
        parts += [f"## {name}", "", *note, table.to_markdown(index=False), ""]
    if claims_frame is not None and not claims_frame.empty:
        parts += ["## Claims", "", f"Every verdict follows one {RULE}.", ""]
        parts += [claims_frame.to_markdown(index=False), ""]
    for name, table in (history or {}).items():
        parts += [f"## Version history: {name}", "", table.to_markdown(index=False), ""]
    return "\n".join(parts)
