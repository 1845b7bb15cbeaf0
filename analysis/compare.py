"""`membench compare BASE NEW`: per benchmark, the change between two sets of results.

A side is an environment (default, jax-0.10.2), a framework version measured in any
environment (jax-0.7.1), or a commit of the suite (a hex prefix). Unlike `asv compare`,
each metric has its direction: memory and time are better lower, throughput higher. A
change counts only beyond a noise threshold, the larger of a relative floor and the spread
measured on either side (the step times' interquartile range, and the range of repeated
runs), and beyond the metric's absolute floor (membench.metrics.change_floor: 16 MiB of host
memory, 1 ms, ...). A framework version names the same records here as in the report's version
table: every run of that version, whichever environment measured it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from analysis.schema import CORE_METRICS, METRICS, MIB
from membench import paths
from membench.metrics import BUSY_SHARE, change_floor

# every memory layer, throughput (step time is its inverse) and XLA's static temp buffers
DEFAULT_METRICS = [
    *(m for m in CORE_METRICS if METRICS[m].unit == "bytes"),
    "throughput_samples_per_second",
    "xla_temp_bytes",
]
DEFAULT_FLOOR = 0.05  # below 5% a single run on a shared machine does not tell
# a compared cell but its framework (added where both sides measured the same one)
CELL_BUT_FRAMEWORK = ["machine", "preset", "workload", "strategy", "batch_size", "world_size"]
REGRESSION, IMPROVEMENT, UNCHANGED = "regression", "improvement", "unchanged"
BUSY = "busy host"  # a speed change measured while other processes used the CPU
# cells whose speed was left unjudged: the two versions were measured in different runs
SPEED_APART = "speed_in_other_runs"


class SideError(ValueError):
    """A side that matches nothing; the message lists what the results hold."""


@dataclass(frozen=True)
class Side:
    text: str
    kind: str  # environment, version or commit
    rows: pd.DataFrame


def _versions(frame: pd.DataFrame, build: bool = False) -> pd.Series:
    """framework-version per row, without a local build tag (torch 2.13.0+cpu -> 2.13.0)
    unless build; empty where a failed cell never learnt its version."""
    version = frame["framework_version"].astype(str)
    version = version if build else version.str.split("+").str[0]
    return (frame["framework"].astype(str) + "-" + version).where(version != "", "")


def _folder(path: str) -> str:
    return str(path).rsplit("/", 1)[0]


def resolve_side(frame: pd.DataFrame, text: str) -> Side:
    """The record rows a side names: a framework version (every run of it, as the report's
    version table reads it), then an environment, then a commit."""
    records = frame[frame["source"] == "record"]
    versions = _versions(records)
    builds = _versions(records, build=True)
    if text and (builds == text).any():  # a build named in full: torch-2.13.0+cu130
        versions = builds
    elif text and len(set(builds[versions == text])) > 1:  # torch-2.13.0: +cpu or the default?
        if (records["environment"] == text).any():  # the sweep's environment of that name
            return Side(text, "environment", records[records["environment"] == text])
        found = ", ".join(sorted(set(builds[versions == text])))
        raise SideError(f"{text} names several builds ({found}): name one in full")
    if (
        text
        and _interpreters(records[versions == text]) > 1
        and (records["environment"] == text).any()
    ):  # jax-0.10.2 on its own Python and on a bridge's: the environment of that name
        return Side(text, "environment", records[records["environment"] == text])
    if text and (versions == text).any():
        # a failed cell of the same environment and commit belongs to the version too
        named = records[versions == text]
        same_run = records["path"].map(_folder).isin(set(named["path"].map(_folder)))
        return Side(
            text, "version", records[same_run & records["framework"].isin(set(named["framework"]))]
        )
    if (records["environment"] == text).any():
        return Side(text, "environment", records[records["environment"] == text])
    if re.fullmatch(r"[0-9a-f]{4,40}", text):
        match = records["commit"].astype(str).str.startswith(text)
        if match.any():
            return Side(text, "commit", records[match])
    valid = sorted((set(records["environment"]) | set(versions)) - {""})
    commits = sorted({str(c)[:12] for c in records["commit"] if c})
    raise SideError(
        f"no results for {text!r}; environments and versions: {', '.join(valid)}; "
        f"commits: {', '.join(commits)}"
    )


def _interpreters(rows: pd.DataFrame) -> int:
    """How many Pythons the rows ran on (a release measured on a bridge's too)."""
    return rows["python"].replace("", pd.NA).dropna().nunique() if "python" in rows else 0


def run_of(rows: pd.DataFrame) -> pd.Series:
    """The run a record belongs to: its version sweep's folder (versions-<preset>-<commit>),
    else its store's."""
    return rows["path"].astype(str).map(lambda p: paths.sweep_of(p) or p.rsplit("/", 1)[0])


def _speed(rows: pd.DataFrame) -> pd.Series:
    speed = {m for m, entry in METRICS.items() if entry.layer == "speed"} | {"step_seconds_median"}
    return rows["metric"].isin(speed)


def _relative_spread(rows: pd.DataFrame) -> float:
    """The largest relative spread in rows: IQR of step times, range across runs."""
    spreads = []
    values = rows["value"].dropna()
    if len(values) > 1 and values.median() > 0:
        spreads.append((values.max() - values.min()) / values.median())
    iqr = (rows["spread_high"] - rows["spread_low"]) / rows["value"]
    spreads.extend(float(x) for x in iqr.dropna() if math.isfinite(x))
    return max(spreads, default=0.0)


def noise(ok: pd.DataFrame, metric: str) -> float:
    """A cell's relative noise in a metric, from its ok rows: the range of its runs and, for
    throughput, its step times' spread (one is the other's inverse)."""
    spread_metric = "step_seconds_median" if metric == "throughput_samples_per_second" else metric
    return _relative_spread(ok[ok["metric"] == spread_metric])


def _summarise(rows: pd.DataFrame, keys: list[str], metrics: list[str]) -> pd.DataFrame:
    """One row per cell and metric: median value, status, and the noise behind it."""
    out = []
    for key, group in rows.groupby(keys, dropna=False):
        cell = dict(zip(keys, key, strict=True))
        ok = group[group["status"] == "ok"]
        status = "ok" if len(ok) else str(group["status"].iloc[-1])
        for metric in metrics:
            own = ok[ok["metric"] == metric]
            if status == "ok" and own["value"].dropna().empty:
                continue  # not measured on this device or by this framework
            out.append({
                **cell, "metric": metric, "status": status,
                "value": float(own["value"].median()) if len(own) else math.nan,
                "noise": noise(ok, metric),
                "busy": float(ok.loc[ok["metric"] == "host_foreign_cpu_share", "value"].max()),
                "reason": "" if status == "ok" else str(group["reason"].iloc[-1]),
            })  # fmt: skip
    return pd.DataFrame(out)


def _verdict(metric: str, base: float, new: float, threshold: float) -> str:
    """Better or worse beyond both the relative threshold and the metric's absolute floor."""
    if not abs(new - base) > change_floor(metric):
        return UNCHANGED
    change = new / base - 1 if base else math.inf * (new - base)
    better = -change if not METRICS[metric].higher_is_better else change
    if better > threshold:
        return IMPROVEMENT
    if better < -threshold:
        return REGRESSION
    return UNCHANGED


def compare(
    base: Side,
    new: Side,
    metrics: list[str] | None = None,
    floor: float = DEFAULT_FLOOR,
) -> pd.DataFrame:
    """One row per cell and metric found on both sides, with change, threshold and verdict.

    A cell that ran on the base side and failed on the new one is a regression (and the
    reverse an improvement), reported once with metric "status"."""
    metrics = metrics or DEFAULT_METRICS
    shared = set(base.rows["framework"]) & set(new.rows["framework"])
    keys = CELL_BUT_FRAMEWORK + (["framework"] if shared else [])
    base_rows, new_rows = base.rows, new.rows
    if {base.kind, new.kind} <= {"version", "environment"}:
        # two releases' speeds compare only within one run (a sweep measures them minutes
        # apart on one host), never across days or hosts; memory may span runs
        runs = set(run_of(base_rows)) & set(run_of(new_rows))
        apart = _speed(base_rows) & ~run_of(base_rows).isin(runs)
        base_rows = base_rows[~apart]
        new_rows = new_rows[~(_speed(new_rows) & ~run_of(new_rows).isin(runs))]
        not_judged = _apart_on_both(base.rows[apart], base_rows, new.rows, keys)
    else:
        not_judged = 0
    a = _summarise(base_rows, keys, metrics)
    b = _summarise(new_rows, keys, metrics)
    if a.empty or b.empty:
        empty = pd.DataFrame()
        empty.attrs[SPEED_APART] = not_judged
        return empty
    on = keys + ["metric"]
    both = a.merge(b, on=on, suffixes=("_base", "_new"))
    rows = []
    status_reported = set()
    for r in both.to_dict("records"):
        cell = tuple(r[k] for k in keys)
        ok_base, ok_new = r["status_base"] == "ok", r["status_new"] == "ok"
        if not (ok_base and ok_new):
            if ok_base == ok_new or cell in status_reported:
                continue
            status_reported.add(cell)
            verdict = REGRESSION if ok_base else IMPROVEMENT
            rows.append({
                **{k: r[k] for k in keys}, "metric": "status",
                "base": r["status_base"], "new": r["status_new"], "change": math.nan,
                "threshold": math.nan, "verdict": verdict,
                "note": r["reason_new"] or r["reason_base"],
            })  # fmt: skip
            continue
        threshold = max(floor, r["noise_base"], r["noise_new"])
        change = r["value_new"] / r["value_base"] - 1 if r["value_base"] else math.nan
        verdict = _verdict(r["metric"], r["value_base"], r["value_new"], threshold)
        note = "higher is better" if METRICS[r["metric"]].higher_is_better else ""
        busy = max((x for x in (r["busy_base"], r["busy_new"]) if not math.isnan(x)), default=0.0)
        if METRICS[r["metric"]].layer == "speed" and busy > BUSY_SHARE and verdict != UNCHANGED:
            verdict, note = BUSY, f"other processes used {busy:.0%} of the CPU"
        rows.append({
            **{k: r[k] for k in keys}, "metric": r["metric"],
            "base": r["value_base"], "new": r["value_new"], "change": change,
            "threshold": threshold, "verdict": verdict, "note": note,
        })  # fmt: skip
    order = {REGRESSION: 0, IMPROVEMENT: 1, BUSY: 2, UNCHANGED: 3}
    out = pd.DataFrame(rows)
    out.attrs[SPEED_APART] = not_judged
    if out.empty:
        return out
    out["_order"] = out["verdict"].map(order)
    return out.sort_values(["_order", *keys, "metric"]).drop(columns="_order")


def _apart_on_both(
    apart: pd.DataFrame, kept: pd.DataFrame, new: pd.DataFrame, keys: list[str]
) -> int:
    """The cells whose speed goes unjudged for being measured in other runs than the new
    side's: left out of the base side (apart), with no run of theirs kept there, and
    measured on the new side (a cell only one side has is no pair)."""
    if apart.empty:
        return 0
    judged = set(kept[_speed(kept)].groupby(keys).groups)
    on_new = set(new[_speed(new)].groupby(keys).groups)
    return sum(1 for cell in apart.groupby(keys).groups if cell in on_new and cell not in judged)


def nothing_shared(base: Side, new: Side) -> str:
    """Why two sides share no cell: where each was measured (machine and preset)."""

    def where(side: Side) -> str:
        places = (
            side.rows[["machine", "preset"]].drop_duplicates().sort_values(["machine", "preset"])
        )
        return "; ".join(f"{m} ({p})" for m, p in places.itertuples(index=False))

    return (
        f"no cell measured on both sides: {base.text} was measured on {where(base)}, "
        f"{new.text} on {where(new)} (a cell is the same machine, preset, workload, strategy, "
        "batch and ranks)"
    )


def pooled_runs(base: Side, new: Side) -> str:
    """Where a side holds several runs of a cell's release (sweeps, rounds): they are pooled,
    their range part of every threshold, which a results page's per-sweep verdicts are not."""
    if not {base.kind, new.kind} <= {"version", "environment"}:
        return ""  # a commit's records are one run of each cell
    keys = [k for k in [*CELL_BUT_FRAMEWORK, "framework"] if k in base.rows and k in new.rows]
    runs = {}
    for side in (base, new):
        per_cell = side.rows.assign(_run=run_of(side.rows)).groupby(keys)["_run"].nunique()
        runs[side.text] = int(per_cell.max()) if len(per_cell) else 0
    if max(runs.values()) < 2:
        return ""
    said = ", ".join(f"{text} up to {n} run{'s' if n > 1 else ''}" for text, n in runs.items())
    return (
        f"pooled over every run of a cell ({said}): the runs' range is part of each threshold; "
        "the results pages judge each sweep apart and count where the sweeps agree"
    )


def regressions(table: pd.DataFrame) -> int:
    return 0 if table.empty else int((table["verdict"] == REGRESSION).sum())


def format_value(metric: str, value: object) -> str:
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    unit = METRICS[metric].unit if metric in METRICS else ""
    if unit == "bytes":
        return f"{float(value) / MIB:,.1f} MiB"
    if unit == "count":
        return f"{float(value):.3g}"
    return f"{float(value):.3g} {unit}"
