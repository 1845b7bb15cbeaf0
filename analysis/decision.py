"""The decision table: per workload and memory budget, what fits and how fast it trains.

One row per framework x strategy searched by `membench capacity`: the largest batch within
the budget (with its margin where the boundary was measured against its noise), samples/s at
that batch (none from a busy host), and against the same framework's reference strategy
(baseline for training, infer for inference) the memory and the speed at one batch the
preset's grid measured both at, each signed one way everywhere. A row that looks wrong (no more
samples than its baseline, or far slower) says why from the records (analysis.decision_evidence);
a search that did not end ok says why. This module builds the tables and says which questions
no search answered; analysis.decision_text writes them for a reader, analysis.search_digest
digests the searches themselves. The Markdown pages, the HTML report and the notebook all show
these tables.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.decision_evidence import (
    best_marks,
    margin_text,
    none_fits_note,
    odd_notes,
    reserves,
    step_in_peak,
)
from analysis.decision_terms import (
    BEST,
    INFERENCE,
    LARGEST,
    LINE_KEYS,
    MARGIN,
    MEMORY_LAYER,
    NOTE,
    PART,
    REFERENCE,
    SPEED,
    SPEED_RUNS,
    TRAINING,
    DecisionKey,
    at_maximum,
    budget_label,
    busy_note,
    busy_of,
    by_date,
    latest_searches,
    memory_header,
    part_of,
    published_speed,
    row_field,
    speed_header,
)
from analysis.families import family, strategy_order
from analysis.labels import metric_label
from analysis.modes import mode_of, modes
from analysis.schema import MIB, PRIMARY_MEMORY, device_kind
from analysis.search_digest import cost_line
from membench.metrics import THROUGHPUT
from membench.records import LEFT_OUT


def _ok_values(cells: pd.DataFrame, metric: str) -> pd.Series:
    """metric value per (framework, strategy, batch) over the cells that ended ok."""
    rows = cells[(cells["metric"] == metric) & (cells["status"] == "ok")].dropna(subset=["value"])
    return rows.groupby(["framework", "strategy", "batch_size"])["value"].last()


def against_reference(cells: pd.DataFrame) -> pd.DataFrame:
    """Per framework, strategy and batch against the same framework's reference strategy at
    the same batch: the memory's change in % (negative: less memory, as every table signs
    it) on the device's primary memory layer (host RSS on a CPU, the allocator's peak on a
    GPU), and the speed as a factor (samples/s over the reference's: above 1 is faster).
    A busy cell has no speed (the loader leaves it out), so no factor."""
    columns = ["framework", "strategy", "batch_size", "memory_pct", "speed_factor"]
    if cells.empty:
        return pd.DataFrame(columns=columns)
    memory = PRIMARY_MEMORY[device_kind(str(cells["device"].iloc[0]))]
    wide = pd.DataFrame(
        {"memory": _ok_values(cells, memory), "speed": _ok_values(cells, THROUGHPUT)}
    )
    if wide.empty:
        return pd.DataFrame(columns=columns)
    wide = wide.reset_index()
    ok = cells[cells["status"] == "ok"]
    cell = ["framework", "strategy", "batch_size"]
    mode = dict(zip(ok[cell].itertuples(index=False, name=None), modes(ok), strict=True))
    wide["reference"] = [
        REFERENCE[part_of(mode[c])] for c in wide[cell].itertuples(index=False, name=None)
    ]
    ref = wide.drop(columns="reference").rename(
        columns={"strategy": "reference", "memory": "ref_memory", "speed": "ref_speed"}
    )
    merged = wide.merge(ref, on=["framework", "reference", "batch_size"])
    merged = merged[merged["strategy"] != merged["reference"]]
    merged["memory_pct"] = (merged["memory"] / merged["ref_memory"] - 1) * 100
    merged["speed_factor"] = merged["speed"] / merged["ref_speed"]
    return merged[columns].reset_index(drop=True)


def comparison_batch(pairs: pd.DataFrame) -> int | None:
    """The batch with the most strategy/reference pairs measured (a tie: the larger batch)."""
    counts = pairs.dropna(subset=["memory_pct"]).groupby("batch_size").size()
    if counts.empty:
        return None
    return int(max(counts.items(), key=lambda item: (item[1], item[0]))[0])


def _one_table(searches: pd.DataFrame, cells: pd.DataFrame, held: pd.DataFrame) -> pd.DataFrame:
    pairs = against_reference(cells)
    searched = pd.MultiIndex.from_frame(searches[["framework", "strategy"]])
    pairs = pairs[pd.MultiIndex.from_frame(pairs[["framework", "strategy"]]).isin(searched)]
    batch = comparison_batch(pairs)
    at = pairs[pairs["batch_size"] == batch].set_index(["framework", "strategy"])
    answers = {(r.framework, r.strategy): r for r in searches.itertuples()}
    rows = []
    for r in searches.itertuples():
        ok = r.status == "ok" and r.largest_batch and r.largest_batch > 0
        none_fits = r.status == "ok" and not ok  # searched, and not even its first batch fits
        pair = (r.framework, r.strategy)
        factor = at.loc[pair, "speed_factor"] if pair in at.index else float("nan")
        notes = [
            (at_maximum(int(r.largest_batch)) if pd.isna(r.smallest_non_fit) else "") if ok
            else none_fits_note(r) if none_fits
            else f"{r.status}: {r.reason}".rstrip(": "),
        ]  # fmt: skip
        if ok and (share := busy_of(r)) is not None:
            notes.append(busy_note(share))
        part = part_of(mode_of(row_field(r, "mode", ""), r.strategy))
        notes += odd_notes(r, answers.get((r.framework, REFERENCE[part])), factor, batch)
        if ok:
            notes.append(step_in_peak(r, held))
        rows.append({
            PART: part, "framework": r.framework, "strategy": r.strategy,
            "family": family(r.strategy),
            LARGEST: int(r.largest_batch) if ok else (0 if none_fits else pd.NA),
            MARGIN: margin_text(r) if ok else "",
            SPEED: published_speed(r),
            SPEED_RUNS: row_field(r, "speed_runs_at_fit", ()) if ok else (),
            memory_header(batch): at.loc[pair, "memory_pct"] if pair in at.index else math.nan,
            speed_header(batch): factor,
            NOTE: "; ".join(n for n in notes if n),
        })  # fmt: skip
    table = pd.DataFrame(rows)
    table[LARGEST] = table[LARGEST].astype("Int64")
    if not (table[MARGIN] != "").any():
        table = table.drop(columns=MARGIN)  # results written before the repeats: as before
    if batch is None:  # the preset measured no pair at a common batch: nothing to compare
        table = table.drop(columns=[memory_header(None), speed_header(None)])
    elif len(cells):  # the layer the saving is on, which may not be the budget's: formatted
        table.attrs[MEMORY_LAYER] = metric_label(  # names it in the column's header
            PRIMARY_MEMORY[device_kind(str(cells["device"].iloc[0]))]
        )
    order = {s: i for i, s in enumerate(strategy_order(table["strategy"]))}
    table = table.assign(
        part_of=table[PART].map({TRAINING: 0, INFERENCE: 1}), _order=table["strategy"].map(order)
    )
    table = table.sort_values(["part_of", "framework", "_order"], kind="stable")
    table = table.drop(columns=["part_of", "_order"]).reset_index(drop=True)
    table.insert(table.columns.get_loc(SPEED), BEST, best_marks(table))
    return table


def with_cost_lines(searches: pd.DataFrame) -> pd.DataFrame:
    """The searches with line_fixed_mib and line_per_sample_mib: each strategy's line over the
    probes of its ok searches at every budget of the preset (NaN with probes at fewer than
    two budgets: the search's own fit then stands), and line_budgets, how many budgets."""
    lines = {}
    ok = searches[searches["status"] == "ok"]
    if "probe_peaks" in ok.columns:
        for key, group in ok.groupby(LINE_KEYS, sort=False):
            if group["budget_gib"].nunique() >= 2 and (line := cost_line(group["probe_peaks"])):
                lines[key] = (line[0] / MIB, line[1] / MIB, group["budget_gib"].nunique())
    found = [lines.get(tuple(row), (math.nan, math.nan, 0))
             for row in searches[LINE_KEYS].itertuples(index=False)]  # fmt: skip
    fixed, per, budgets = zip(*found, strict=True) if found else ((), (), ())
    return searches.assign(
        line_fixed_mib=list(fixed), line_per_sample_mib=list(per), line_budgets=list(budgets)
    )


def decision_table(
    view: pd.DataFrame, capacity: pd.DataFrame, probes: pd.DataFrame | None = None
) -> dict[DecisionKey, pd.DataFrame]:
    """Per (machine, workload, preset, budget): a row per framework x strategy searched, training
    rows first. `view` is analysis.loader.latest()'s; `capacity`
    analysis.capacity_loader.load_capacity's; `probes` (load_capacity_probes') gives the
    allocators' reserves a step in a peak is told with. The same search in two runs: the later
    run wins (latest_searches)."""
    if capacity.empty:
        return {}
    keys = ["machine", "workload", "preset", "budget_gib"]
    searches = with_cost_lines(latest_searches(capacity))
    searches = searches[searches["status"] != LEFT_OUT]  # said under the table (unsearched)
    held = reserves(probes)
    tables = {}
    for key, group in searches.groupby(keys, sort=True):
        machine, workload, preset, _ = key
        cells = view[
            (view["machine"] == machine) & (view["workload"] == workload)
            & (view["preset"] == preset)
        ]  # fmt: skip
        tables[(str(machine), str(workload), str(preset), float(key[3]))] = _one_table(
            group, cells, held
        )
    return tables


def lead_searches(capacity: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(what the summary leads with, the rest): per workload, the searches of the preset
    whose boundaries were measured against their noise (the most repeats: the standard
    sizes' preset), then searched at the most budgets (whose answers carry to a reader's own
    budget; a tie goes to the most searches, then the name), and the other presets'
    searches, whose decision tables are on the capacity page."""
    if capacity.empty:
        return capacity, capacity
    lead = {}
    for workload, rows in capacity.groupby("workload"):
        size = rows.groupby("preset").agg(
            repeats=("repeats", "max"), budgets=("budget_gib", "nunique"),
            searches=("run", "size"),
        )  # fmt: skip
        ranked = sorted(
            size.itertuples(), key=lambda r: (-r.repeats, -r.budgets, -r.searches, r.Index)
        )
        lead[workload] = ranked[0].Index
    chosen = capacity["preset"] == capacity["workload"].map(lead)
    return capacity[chosen], capacity[~chosen]


def lead_first(
    tables: dict[DecisionKey, pd.DataFrame], capacity: pd.DataFrame
) -> dict[DecisionKey, pd.DataFrame]:
    """The tables of several machines in a reader's order: the machine with the most searches
    of its lead presets (lead_searches: the standard sizes) first, and on each machine its
    lead presets' tables before the other presets'."""
    if not tables:
        return tables
    lead: set[tuple[str, str, str]] = set()
    weight: dict[str, int] = {}
    shown = latest_searches(capacity)
    for machine, rows in shown[shown["status"] != LEFT_OUT].groupby("machine"):
        chosen, _ = lead_searches(rows)
        pairs = zip(chosen["workload"], chosen["preset"], strict=True)
        lead |= {(str(machine), w, p) for w, p in pairs}
        weight[str(machine)] = len(chosen)

    def rank(key: DecisionKey) -> tuple:
        machine, workload, preset, gib = key
        return (-weight.get(machine, 0), machine, (machine, workload, preset) not in lead, key)

    return {key: tables[key] for key in sorted(tables, key=rank)}


def unsearched(searches: pd.DataFrame, key: DecisionKey) -> str:
    """The sentences under a decision table: the searches the preset leaves out, with its
    reason, the frameworks that the same preset searched elsewhere on this machine (other
    workloads or budgets) but not here, and the strategies it searched for a framework of this
    table on another machine only (where searches holds other machines' rows), so that a
    missing row reads as not measured, not as not fitting; "" where none is missing.
    searches: every search a page has, not only those its tables show (its lead presets')."""
    machine, workload, preset, budget = key
    of_preset = searches[searches["preset"] == preset]
    mine = of_preset[of_preset["machine"] == machine]
    # each budget's searches of this workload, picked as its table picks them
    per_budget = latest_searches(mine[mine["workload"] == workload])
    rows = per_budget[(per_budget["budget_gib"] == budget) & (per_budget["status"] != LEFT_OUT)]
    # A preset leaves a pair out at every budget, and a run that searched other frameworks
    # records no left-out row: so each pair is spoken of as the latest of its budgets'
    # searches has it, which is what the preset does now.
    now = by_date(per_budget).drop_duplicates(["framework", "strategy"], keep="last")
    out = now["status"] == LEFT_OUT
    left = now[out & ~_pairs(now).isin(set(_pairs(rows)))]
    sentences = [left_out_sentence(left)]
    only_left = set(left["framework"]) - set(now[~out]["framework"])
    # each framework the preset searched on this machine (another budget or workload) that
    # lacks a strategy here: by name where a row here or the left-out sentence speaks of it
    # (a table of a few strategies, measured to answer one question, says which it left),
    # whole, and first, where it is missing from both
    searched = mine[mine["status"] != LEFT_OUT]
    whole, lacking = [], []
    for framework, group in searched.groupby("framework", sort=True):
        if framework in only_left:
            continue
        in_table = rows[rows["framework"] == framework]
        in_left = left[left["framework"] == framework]
        if in_table.empty and in_left.empty:
            whole.append(f"{framework} ({_searched_where(group, workload, budget)})")
        elif missing := strategy_order(
            set(group["strategy"]) - set(in_table["strategy"]) - set(in_left["strategy"])
        ):
            there = group[group["strategy"].isin(missing)]
            lacking.append(
                f"{framework} {', '.join(missing)} ({_searched_where(there, workload, budget)})"
            )
    if whole + lacking:
        sentences.append(
            f"Not searched here: {'; '.join(whole + lacking)}; no row here is no answer."
        )
    # a framework of this table without a strategy another framework here has, searched by
    # this preset nowhere on this machine: named, so that its missing row reads as unmeasured
    never = []
    elsewhere_done = of_preset[
        (of_preset["machine"] != machine) & (of_preset["status"] != LEFT_OUT)
    ]
    for framework in sorted(set(rows["framework"])):
        own = set(searched[searched["framework"] == framework]["strategy"])
        others = set(rows[rows["framework"] != framework]["strategy"]) - own
        others -= set(left[left["framework"] == framework]["strategy"])
        others -= set(elsewhere_done[elsewhere_done["framework"] == framework]["strategy"])
        if others:
            never.append(f"{framework} {', '.join(strategy_order(others))}")
    if never:
        sentences.append(
            f"Never searched by this preset on this machine: {'; '.join(never)} (no answer "
            "either way)."
        )
    other_hosts = _other_hosts_only(of_preset[of_preset["machine"] != machine], mine, rows)
    sentences.append(
        _unanswered("Never searched on this machine", other_hosts, "on another machine")
    )
    return " ".join(s for s in sentences if s)


def _searched_where(searches: pd.DataFrame, workload: str, budget: float) -> str:
    """Where a preset's searches of a framework or strategy are, said from a table of
    `workload` at `budget`: "searched for transformer", "searched at 3 GiB"."""
    other_workloads = sorted(set(searches["workload"]) - {workload})
    if other_workloads:
        return f"searched for {', '.join(other_workloads)} only"
    budgets = sorted(set(searches["budget_gib"]) - {budget})
    return f"searched at {', '.join(budget_label(b) for b in budgets)} only" if budgets else (
        "searched in an earlier run")  # fmt: skip


def _pairs(searches: pd.DataFrame) -> pd.Series:
    """Each search's (framework, strategy)."""
    pairs = zip(searches["framework"], searches["strategy"], strict=True)
    return pd.Series(list(pairs), searches.index, dtype=object)


def _unanswered(head: str, entries: list[str], where: str) -> str:
    """One sentence of searches a table has no row for ("" where none), and where the preset
    has them, so that no row reads as no answer."""
    if not entries:
        return ""
    one = len(entries) == 1 and "," not in entries[0]
    return (
        f"{head}: {'; '.join(entries)} (this preset has searches of {'it' if one else 'them'} "
        f"{where}: no row here is no answer)."
    )


def _other_hosts_only(elsewhere: pd.DataFrame, mine: pd.DataFrame, rows: pd.DataFrame) -> list[str]:
    """Per framework with rows in this table (rows), the strategies the preset searched for
    it on another machine (elsewhere: the preset's searches there) and never on this one
    (mine), at any workload or budget (for example a strategy added to the preset after this
    host's searches)."""
    others = elsewhere[elsewhere["status"] != LEFT_OUT]
    entries = []
    for framework in sorted(set(rows["framework"]) & set(others["framework"])):
        own = set(mine[mine["framework"] == framework]["strategy"])
        if never := set(others[others["framework"] == framework]["strategy"]) - own:
            entries.append(f"{framework} {', '.join(strategy_order(never))}")
    return entries


def left_out_sentence(left: pd.DataFrame) -> str:
    """Which searches the preset leaves out and why, one clause per framework and reason."""
    if left.empty:
        return ""
    clauses = [
        f"{framework} {', '.join(strategy_order(part['strategy'].unique()))} ({reason})"
        for (framework, reason), part in left.groupby(["framework", "reason"], sort=True)
    ]
    return f"Left out by this preset, so no row: {'; '.join(clauses)}."
