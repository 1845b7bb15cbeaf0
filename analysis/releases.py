"""Framework releases judged against each other, from the version sweeps' records.

A sweep (`membench versions`) measured every release of a framework on the same cells, cell
by cell on one host. Each release is judged against the one before it with `membench
compare`'s rule (analysis.compare): a change counts only beyond the larger of 5% and the noise
measured on either side (the step times' spread), and beyond the metric's absolute floor
(16 MiB of host memory, 1 ms, 0.1 samples/s). Speed verdicts come from one sweep only (the
releases measured minutes apart); a release measured in another sweep is never set beside it.

Where a change persists along the chain of releases, the release that brought it is found by
asv's own step detection (asv.step_detect.detect_steps: a piecewise-constant fit of the series,
weighted by each point's noise); a step counts where the values before and after it differ by
the same rule.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.compare import (
    DEFAULT_FLOOR,
    IMPROVEMENT,
    REGRESSION,
    UNCHANGED,
    Side,
    _verdict,
    compare,
)
from analysis.compare import noise as relative_noise
from analysis.history import release_key
from analysis.labels import metric_label
from analysis.schema import METRICS, MIB
from membench import paths
from membench.metrics import change_floor

# what a release is judged on: host memory (the whole step and the first step, compilation
# included) and training speed
RELEASE_METRICS = [
    "peak_host_rss_bytes",
    "first_step_peak_host_rss_bytes",
    "throughput_samples_per_second",
]
CELL = ["workload", "strategy", "batch_size"]


def sweep_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The records of the version sweeps, with their sweep (its folder) and release."""
    rows = frame[frame["source"] == "record"].copy()
    rows["sweep"] = rows["path"].map(paths.sweep_of)
    rows = rows[rows["sweep"] != ""]
    rows["release"] = rows["framework_version"].astype(str)
    # a build's releases form a chain of their own (torch's CPU build 2.13.0+cpu apart from
    # the default builds 2.13.0+cu130, 2.14.1+cu130): a build change is not a release's
    # (a machine without sweeps: str.partition of no rows has no column 2)
    rows["build"] = rows["release"].str.partition("+")[2] if len(rows) else ""
    return rows[rows["release"] != ""]


def releases_of(rows: pd.DataFrame) -> list[str]:
    return sorted(rows["release"].unique(), key=release_key)


def pair_verdicts(frame: pd.DataFrame, metrics: list[str] | None = None) -> pd.DataFrame:
    """Each release against the one before it, per machine, sweep and framework: one row per
    cell and metric (compare's columns), with framework, base and new release."""
    metrics = metrics or RELEASE_METRICS
    rows = sweep_rows(frame)
    out = []
    for (machine, sweep, framework), group in rows.groupby(["machine", "sweep", "framework"]):
        for older, newer, kind in _pairs(group):
            base = Side(older, "version", group[group["release"] == older])
            new = Side(newer, "version", group[group["release"] == newer])
            table = compare(base, new, metrics, DEFAULT_FLOOR)
            if table.empty:
                continue
            table = table.assign(
                machine=machine, sweep=sweep, framework=framework, base_release=older,
                new_release=newer, kind=kind,
            )  # fmt: skip
            out.append(table)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def _pairs(group: pd.DataFrame) -> list[tuple[str, str, str]]:
    """What a sweep sets side by side for one framework: each release against the one before
    it within a build ("release"), and a release's builds against each other ("build":
    torch's CPU build against its default build, what the CUDA libraries cost a CPU user)."""
    pairs = []
    for _, builds in group.groupby("build"):
        chain = releases_of(builds)
        pairs += [(a, b, "release") for a, b in zip(chain, chain[1:], strict=False)]
    public = group["release"].str.partition("+")[0]
    for _, same in group.groupby(public):
        chain = sorted(same["release"].unique())
        pairs += [(a, b, "build") for a, b in zip(chain, chain[1:], strict=False)]
    return pairs


def series(group: pd.DataFrame, metric: str) -> tuple[list[str], list[float], list[float]]:
    """One cell's values of a metric along its releases (oldest first), and their noise."""
    chain = releases_of(group)
    values, noise = [], []
    for release in chain:
        own = group[(group["release"] == release) & (group["status"] == "ok")]
        found = own.loc[own["metric"] == metric, "value"].dropna()  # busy speed is NaN
        values.append(float(found.median()) if len(found) else math.nan)
        noise.append(relative_noise(own, metric))
    return chain, values, noise


def steps_in(chain: list[str], values: list[float], noise: list[float], metric: str) -> list[dict]:
    """The releases at which a metric's series steps, by asv's step detection, each kept
    where the levels before and after it differ by compare's rule."""
    from asv.step_detect import detect_steps

    if sum(1 for v in values if not math.isnan(v)) < 2:
        return []
    floor = change_floor(metric)
    weights = [
        1.0 / max(n * abs(v), floor, 1e-12) if not math.isnan(v) else math.nan
        for v, n in zip(values, noise, strict=True)
    ]
    segments = _merged(detect_steps(values, weights), values, noise, metric)
    found = []
    for before, after in zip(segments, segments[1:], strict=False):
        at, last = after[0], before[1] - 1
        threshold = max(DEFAULT_FLOOR, noise[at], noise[last])
        found.append({
            "metric": metric, "release": chain[at], "previous": chain[last],
            "before": before[2], "after": after[2], "change": after[2] / before[2] - 1,
            "threshold": threshold, "verdict": _verdict(metric, before[2], after[2], threshold),
            # lasting: the new level holds over two releases or more to the newest
            "persists": after[1] == len(values) and after[1] - after[0] >= 2,
        })  # fmt: skip
    return found


def _merged(
    segments: list[tuple], values: list[float], noise: list[float], metric: str
) -> list[tuple[int, int, float]]:
    """asv's segments (left, right, level), neighbours whose levels do not differ by
    compare's rule joined into one (its level: the median of its values). With a handful of
    releases asv's fit gives each point its own level; the rule says which steps are real."""
    out: list[tuple[int, int, float]] = []
    for left, right, *_ in segments:
        level = _level(values[left:right])
        if out:
            a, b, prior = out[-1]
            threshold = max(DEFAULT_FLOOR, noise[left], noise[b - 1])
            if _verdict(metric, prior, level, threshold) == UNCHANGED:
                out[-1] = (a, right, _level(values[a:right]))
                continue
        out.append((left, right, level))
    return out


def _level(values: list[float]) -> float:
    kept = sorted(v for v in values if not math.isnan(v))
    return float(pd.Series(kept).median()) if kept else math.nan


def first_releases(frame: pd.DataFrame, metrics: list[str] | None = None) -> pd.DataFrame:
    """Per machine, sweep, framework and cell: each step along the release chain and the
    release that brought it (needs three releases or more to tell a step from noise)."""
    metrics = metrics or RELEASE_METRICS
    rows = sweep_rows(frame)
    out = []
    keys = ["machine", "sweep", "framework", "build", *CELL]
    for key, group in rows.groupby(keys):
        if len(releases_of(group)) < 3:
            continue
        for metric in metrics:
            chain, values, noise = series(group, metric)
            for step in steps_in(chain, values, noise, metric):
                out.append({**dict(zip(keys, key, strict=True)), **step})
    return pd.DataFrame(out)


def _size(metric: str, base: float, new: float) -> str:
    if METRICS[metric].unit == "bytes":
        return f"{(new - base) / MIB:+,.0f} MiB ({new / base - 1:+.0%})"
    return f"{new / base - 1:+.0%} ({base:.3g} -> {new:.3g} {METRICS[metric].unit})"


def _example(r: dict) -> str:
    """One judged change as a reader reads it: metric, cell, size and the noise it beat."""
    return (
        f"{METRICS[r['metric']].label}, {r['workload']} {r['strategy']} b{r['batch_size']}, "
        f"{_size(r['metric'], r['base'], r['new'])}, noise {r['threshold']:.0%}"
    )


def fullest_sweep(frame: pd.DataFrame, machine: str) -> str:
    """The sweep a machine's summary shows: the one with the most records (a part measured
    later for a few cells does not replace the whole), the newest among equals."""
    rows = sweep_rows(frame)
    rows = rows[rows["machine"] == machine]
    size = rows.groupby("sweep").agg(n=("path", "nunique"), newest=("started_at", "max"))
    return str(size.sort_values(["n", "newest"]).index[-1])


def summary_lines(frame: pd.DataFrame, machine: str) -> list[str]:
    """The summary page's section: per framework, each release against the one before it
    (counts, and the largest change with its noise), a release's builds against each other,
    then the releases that brought a lasting change. At most a screen."""
    pairs = pair_verdicts(frame)
    if pairs.empty:
        return []
    pairs = pairs[(pairs["machine"] == machine) & (pairs["metric"] != "status")]
    if pairs.empty:
        return []
    latest = fullest_sweep(frame, machine)
    pairs = pairs[pairs["sweep"] == latest]
    mine = sweep_rows(frame)
    mine = mine[(mine["machine"] == machine) & (mine["sweep"] == latest)]
    runs = int(mine.groupby(["release", *CELL])["path"].nunique().max())
    lines = [
        f"Each release against the one before it, from one sweep (`{latest}`: every release "
        f"measured cell by cell on this host, {runs} run{'s' if runs > 1 else ''} a cell); "
        "a change counts beyond 5%, the "
        "noise measured on either side (the runs' range, the step times' spread) and the "
        "metric's floor (`membench compare`'s rule). Every change: the versions page.",
        "",
        "| framework | releases | regressed | improved | unchanged | largest change (metric, "
        "cell, size, noise) |",
        "|---|---|---|---|---|---|",
    ]
    for (framework, kind, base, new), group in pairs.groupby(
        ["framework", "kind", "base_release", "new_release"], sort=False
    ):
        counts = group["verdict"].value_counts()
        judged = group[group["verdict"].isin([REGRESSION, IMPROVEMENT])]
        largest = "-"
        if len(judged):
            r = judged.loc[judged["change"].abs().idxmax()]
            largest = f"{r['verdict']}: {_example(r)}"
        what = f"{base} -> {new}" + (" (builds)" if kind == "build" else "")
        lines.append(
            f"| {framework} | {what} | {counts.get(REGRESSION, 0)} | "
            f"{counts.get(IMPROVEMENT, 0)} | {counts.get(UNCHANGED, 0)} | {largest} |"
        )
    lines += _lasting(frame, machine, latest)
    return lines


def _lasting(frame: pd.DataFrame, machine: str, sweep: str) -> list[str]:
    """The releases that brought a change still there at the newest release (the new level
    over two releases or more), by asv's step detection: counts and the largest."""
    firsts = first_releases(frame)
    if firsts.empty:
        return []
    mine = firsts[(firsts["machine"] == machine) & (firsts["sweep"] == sweep)]
    lasting = mine[mine["persists"] & (mine["verdict"] != UNCHANGED)]
    if lasting.empty:
        return ["", "No change lasts along a chain of three releases or more (asv's step "
                "detection over each cell's releases)."]  # fmt: skip
    lines = ["", "Lasting changes and the release that brought them (asv's step detection "
             "over each cell's releases; the new level holds to the newest):", ""]  # fmt: skip
    for (framework, release, verdict), group in lasting.groupby(
        ["framework", "release", "verdict"]
    ):
        r = group.loc[group["change"].abs().idxmax()]
        example = _example({**r, "base": r["before"], "new": r["after"]})
        lines.append(f"- {framework} {release}: {len(group)} {verdict}s, largest {example}")
    return lines


def reference_tables(frame: pd.DataFrame, machine: str) -> dict[str, pd.DataFrame]:
    """Every judged change per sweep and framework (the versions page)."""
    pairs = pair_verdicts(frame)
    if pairs.empty:
        return {}
    pairs = pairs[(pairs["machine"] == machine) & (pairs["verdict"] != UNCHANGED)]
    out = {}
    for (sweep, framework), group in pairs.groupby(["sweep", "framework"]):
        table = group.assign(
            releases=group["base_release"] + " -> " + group["new_release"],
            metric=group["metric"].map(metric_label),
            base=[_shown(m, v) for m, v in zip(group["metric"], group["base"], strict=True)],
            new=[_shown(m, v) for m, v in zip(group["metric"], group["new"], strict=True)],
            change=group["change"].map(lambda c: "" if pd.isna(c) else f"{c:+.1%}"),
            noise=group["threshold"].map(lambda t: "" if pd.isna(t) else f"{t:.1%}"),
        )[["releases", *CELL, "metric", "base", "new", "change", "noise", "verdict"]]
        out[f"{framework}, sweep {sweep}"] = table.rename(columns={"batch_size": "batch"})
    return out


def _shown(metric: str, value: object) -> str:
    if isinstance(value, str):
        return value
    if metric in METRICS and METRICS[metric].unit == "bytes":
        return f"{float(value) / MIB:,.0f} MiB"
    return f"{float(value):.3g}"
