"""The answer a summary page leads with: per workload, one compact table of what fits in each
budget and how fast it trains there (framework, strategy, largest batch, samples/s, a mark
for how far the batch is known, the memory layer the budget held, the commit and date that
measured it). The margins, spreads, fitted costs and notes behind each row are in the full
decision tables (analysis.decision) on the workload's reference page."""

from __future__ import annotations

import math
import re
from typing import Any

import pandas as pd

from analysis.decision_terms import (
    BEST,
    INFERENCE,
    PART,
    TRAINING,
    DecisionKey,
    budget_label,
    latest_searches,
    published_speed,
)
from analysis.decision_text import speed_figure
from analysis.families import strategy_order
from analysis.labels import layer_word
from analysis.modes import mode_of
from analysis.schema import MIB
from membench.records import LEFT_OUT, UNSETTLED

VERIFIED, NOISE, PREDICTED = "verified", "within noise", "predicted"
AT_MAXIMUM = "lower bound"  # the search's largest batch fitted: nothing larger was tried
MARKS_SAID = (
    f"Marks: {VERIFIED}, every run of the batch fitted with the runs' spread to spare and the "
    f"next batch did not; {NOISE}, the spread exceeds the margin (searches before that rule); "
    f"{PREDICTED}, no search settled and the batch is the memory model's guess (~N); "
    f"{AT_MAXIMUM}, the search's largest batch fitted (>= N)."
)


def commit_of(run: object) -> str:
    """A capacity run's commit, short: the folder's name ends in it."""
    return str(run).rsplit("-", 1)[-1][:7]


def date_span(dates: list[str]) -> str:
    """2026-11-25; 2026-11-26/27 for days of one month; else "first to last"."""
    days = sorted({d[:10] for d in dates if d})
    if not days:
        return "-"
    if len(days) == 1:
        return days[0]
    if len({d[:7] for d in days}) == 1 and len(days) <= 3:
        return days[0] + "".join(f"/{d[8:]}" for d in days[1:])
    return f"{days[0]} to {days[-1]}"


def _known(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def mark(row: Any) -> str:
    """How far a search's batch is known (MARKS_SAID), or its status where it has none."""
    batch = row.largest_batch if _known(row.largest_batch) else 0
    if row.status == "ok" and batch > 0:
        if not _known(row.smallest_non_fit):
            return AT_MAXIMUM
        spread, margin = row.spread_mib, row.margin_mib
        return NOISE if _known(spread) and _known(margin) and spread > margin else VERIFIED
    if row.status == "ok":
        return "none fits"
    if row.status == UNSETTLED and _known(row.predicted_batch):
        return PREDICTED
    return str(row.status)


def batch_text(row: Any) -> str:
    """The row's batch as a reader takes it: 24, >= 24 (the search's maximum), ~24 (a guess),
    0 (none fits), or its status."""
    kind = mark(row)
    if kind in (VERIFIED, NOISE):
        return str(int(row.largest_batch))
    if kind == AT_MAXIMUM:
        return f">= {int(row.largest_batch)}"
    if kind == PREDICTED:
        return f"~{int(row.predicted_batch)}"
    return "0" if kind == "none fits" else "-"


def shown_searches(capacity: pd.DataFrame) -> pd.DataFrame:
    """The searches a decision table shows: the latest of each, the left-out ones dropped."""
    if capacity.empty:
        return capacity
    shown = latest_searches(capacity)
    return shown[shown["status"] != LEFT_OUT]


def provenance(capacity: pd.DataFrame) -> str:
    """Which commits ran a page's searches and when: "8 of 9 searches by af9ac14 on
    2026-11-26/27, 1 by 47bc67f on 2026-11-25" (each search's own measured_at)."""
    shown = shown_searches(capacity)
    if shown.empty:
        return ""
    when = shown["measured_at"].fillna(shown["run_at"]).astype(str)
    shown = shown.assign(commit=shown["run"].map(commit_of), when=when)
    counts = shown.groupby("commit")["when"].agg(["size", list])
    counts = counts.assign(first=counts["list"].map(min)).sort_values(
        ["size", "first"], ascending=[False, True]
    )
    parts = [
        f"{n} by {commit} on {date_span(dates)}"
        for commit, n, dates in zip(counts.index, counts["size"], counts["list"], strict=True)
    ]
    if len(parts) > 3:  # the rest in one clause: each row's measured column names its own
        rest = counts.iloc[2:]
        dates = [d for found in rest["list"] for d in found]
        parts = [*parts[:2], f"{rest['size'].sum()} by {len(rest)} other commits on "
                 f"{date_span(dates)}"]  # fmt: skip
    total = len(shown)
    head = f"{parts[0].split(' by ')[0]} of {total} searches" if len(parts) > 1 else (
        f"All {total} searches" if total > 1 else "The search")  # fmt: skip
    return f"{head} by {parts[0].split(' by ', 1)[1]}" + "".join(f", {p}" for p in parts[1:])


def _row_order(rows: pd.DataFrame) -> list[tuple[str, str]]:
    """(framework, strategy) pairs: training first, each framework's strategies in the
    families' order, then inference."""
    order = {s: i for i, s in enumerate(strategy_order(rows["strategy"].unique()))}
    modes = [0 if _part(r) == TRAINING else 1 for r in rows.itertuples()]
    ranked = rows.assign(_part=modes, _order=rows["strategy"].map(order))
    ranked = ranked.sort_values(["_part", "framework", "_order"], kind="stable")
    return list(dict.fromkeys(zip(ranked["framework"], ranked["strategy"], strict=True)))


def _part(row: Any) -> str:
    return INFERENCE if mode_of(getattr(row, "mode", "") or "", row.strategy) == "infer" else (
        TRAINING)  # fmt: skip


def _speed(row: Any, best: str) -> str:
    """Samples/s at the answer (none from a busy host, as the decision table has it), bold
    where it is its framework's fastest at that budget or ties with it."""
    value = published_speed(row)
    if not _known(value):
        return "-"
    text = speed_figure(value)
    return f"**{text}**" if best in ("best", "tied") else text


def answer_table(searches: pd.DataFrame, tables: dict[DecisionKey, pd.DataFrame]) -> pd.DataFrame:
    """One workload's compact table over its preset's budgets (searches: the shown searches
    of one machine, workload and preset; tables: decision_table's, for the best marks)."""
    budgets = sorted(searches["budget_gib"].unique())
    best: dict[tuple[float, str, str], str] = {}
    for (_, workload, preset, gib), table in tables.items():
        if workload == searches["workload"].iloc[0] and preset == searches["preset"].iloc[0]:
            for r in table[table[PART] == TRAINING].itertuples():
                best[(gib, r.framework, r.strategy)] = getattr(r, BEST, "")
    rows = []
    for framework, strategy in _row_order(searches):
        mine = searches[(searches["framework"] == framework) & (searches["strategy"] == strategy)]
        row: dict[str, str] = {"framework": framework, "strategy": strategy}
        marks, layers, made = {}, [], []
        for gib in budgets:
            at = mine[mine["budget_gib"] == gib]
            label = budget_label(gib)
            column = label  # its cells: "batch @ samples/s" (the page's intro says so)
            if at.empty:
                row[column] = "-"
                continue
            r = next(at.itertuples())
            speed = _speed(r, best.get((gib, framework, strategy), ""))
            row[column] = batch_text(r) + ("" if speed == "-" else f" @ {speed}")
            marks[label] = mark(r)
            layers.append(layer_word(r.budget_layer))
            when = r.measured_at if _known(r.measured_at) and r.measured_at else r.run_at
            made.append((commit_of(r.run), str(when)))
        kinds = list(dict.fromkeys(marks.values()))
        row["mark"] = kinds[0] if len(kinds) == 1 else "; ".join(
            f"{k} {v}" for k, v in marks.items())  # fmt: skip
        row["layer"] = ", ".join(dict.fromkeys(layers))
        commits = list(dict.fromkeys(c for c, _ in made))
        row["measured"] = f"{', '.join(commits)} {date_span([w for _, w in made])}"
        rows.append(row)
    return pd.DataFrame(rows)


def answers(
    capacity: pd.DataFrame, tables: dict[DecisionKey, pd.DataFrame]
) -> dict[tuple[str, str], pd.DataFrame]:
    """(workload, preset) -> its compact table, for the searches a page leads with (one
    machine's lead_searches)."""
    shown = shown_searches(capacity)
    out = {}
    for (workload, preset), searches in shown.groupby(["workload", "preset"], sort=True):
        out[(str(workload), str(preset))] = answer_table(searches, tables)
    return out


def limit_sentence(searches: pd.DataFrame, view: pd.DataFrame) -> str:
    """Where a GPU answer fits a budget that the same strategy's cell, measured without a
    limit at a smaller batch, exceeded on the budget's layer: why both hold, once, in
    measured terms (the allocator frees its cache and retries under a limit); "" where
    nothing looks so."""
    gpu = searches[searches["budget_layer"].astype(str).str.startswith("peak_device")]
    for r in gpu[gpu["status"] == "ok"].itertuples():
        cells = view[
            (view["workload"] == r.workload) & (view["framework"] == r.framework)
            & (view["strategy"] == r.strategy) & (view["metric"] == r.budget_layer)
            & (view["status"] == "ok") & (view["batch_size"] <= (r.largest_batch or 0))
        ]  # fmt: skip
        over = cells[cells["value"] > r.budget_gib * 2**30]
        if len(over):
            cell = over.sort_values("batch_size").iloc[-1]
            return (
                f"Why both hold: {r.framework} {r.strategy}'s cell at batch "
                f"{int(cell['batch_size'])}, measured without a limit, reached "
                f"{cell['value'] / MIB:,.0f} MiB {layer_word(r.budget_layer)}, over the "
                f"{budget_label(r.budget_gib)} budget, while {int(r.largest_batch)} fits it: "
                "under an enforced limit the caching allocator frees its cache and retries "
                "before it runs out of memory, and XLA compiles the step to the memory it is "
                "given, so a search's answer, not a cell's peak, says what fits."
            )
    return ""


def cpu_name(machine: str) -> str:
    """What a host kind's name says, in words: "amd-epyc-f25m17-avx512bf16-2core-24gib" ->
    "AMD EPYC, CPU family 25 model 17, AVX-512 BF16, 2 cores, 24 GiB"; "" where the name
    carries no CPU family and model (an older label, or a GPU's name)."""
    found = re.search(r"-f(\d+)m(\d+)(?:-([a-z0-9]+))?-(\d+)core-(\d+)gib", machine)
    if not found:
        return ""
    family, model, isa, cores, gib = found.groups()
    vendor = machine[: found.start()].replace("-", " ").upper()
    isa_said = {"avx512bf16": "AVX-512 BF16", "avx512": "AVX-512", "avx2": "AVX2"}.get(
        isa or "", isa or "")  # fmt: skip
    parts = [vendor, f"CPU family {family} model {model}", isa_said, f"{cores} cores",
             f"{gib} GiB"]  # fmt: skip
    return ", ".join(p for p in parts if p)


def speed_between_hosts(capacity: pd.DataFrame) -> str:
    """One sentence per pair of CPU host kinds that ran the same searches (workload, preset,
    budget, framework, strategy): the median ratio of their samples/s at the answers, from
    their quiet runs. Hosts whose names carry no family and model are left out."""
    shown = shown_searches(capacity)
    if shown.empty:
        return ""
    shown = shown.assign(speed=[published_speed(r) for r in shown.itertuples()])
    shown = shown[shown["machine"].map(lambda m: bool(cpu_name(str(m))))].dropna(subset=["speed"])
    keys = ["workload", "preset", "budget_gib", "framework", "strategy"]
    said = []
    hosts = sorted(shown["machine"].unique())
    for i, a in enumerate(hosts):
        for b in hosts[i + 1 :]:
            both = shown[shown["machine"] == a].merge(
                shown[shown["machine"] == b], on=keys, suffixes=("_a", "_b")
            )
            if len(both) < 5:
                continue
            ratio = float((both["speed_b"] / both["speed_a"]).median())
            fast, slow = (b, a) if ratio >= 1 else (a, b)
            said.append(
                f"{_short_host(fast)} runs the same searches {max(ratio, 1 / ratio):.1f}x "
                f"faster than {_short_host(slow)} (median over {len(both)} answers' samples/s)"
            )
    if not said:
        return ""
    return (
        "Host kinds differ in speed, not only in name: " + "; ".join(said) + ". Compare "
        "samples/s only within one host kind."
    )


def _short_host(machine: str) -> str:
    """The family and model part of a host kind's name: "f25m17"."""
    found = re.search(r"-(f\d+m\d+)", machine)
    return found.group(1) if found else machine
