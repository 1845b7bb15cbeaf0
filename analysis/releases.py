"""Framework releases judged against each other, from the version sweeps' records.

A sweep (`membench versions`) measured every release of a framework on the same cells, cell
by cell on one host. Each release is judged against the one before it with `membench
compare`'s rule (analysis.compare): a change counts only beyond the larger of 5% and the noise
measured on either side (the step times' spread), and beyond the metric's absolute floor
(16 MiB of host memory, 1 ms, 0.1 samples/s). Speed verdicts come from one sweep only (the
releases measured minutes apart); a release measured in another sweep is never set beside it.

A release that needs a newer interpreter than the one before it (jax 0.11 needs Python 3.12)
is measured beside a bridge: the older release on the newer interpreter too. The chain then
runs 0.10.2 -> 0.10.2 (py3.12) -> 0.11.2 (py3.12): the first pair judges the interpreter
("interpreter"), the second the release on one interpreter, so that a verdict names one change.

Where a change persists along the chain of releases, the release that brought it is found by
asv's own step detection (asv.step_detect.detect_steps: a piecewise-constant fit of the series,
weighted by each point's noise); a step counts where the values before and after it differ by
the same rule.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from analysis.compare import (
    BUSY,
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
    if len(rows) and "python" in rows:
        rows["release"] = _with_interpreter(rows)
    # a build's releases form a chain of their own (torch's CPU build 2.13.0+cpu apart from
    # the default builds 2.13.0+cu130, 2.14.1+cu130): a build change is not a release's
    # (a machine without sweeps: str.partition of no rows has no column 2)
    # (a default build's CUDA version is the release's own: 2.14.1+cu130 -> 2.15.0+cu132 is a
    # release's change, so the build is "cuda" whichever CUDA it carries)
    build = rows["release"].str.partition("+")[2] if len(rows) else ""
    rows["build"] = build.str.replace(r"^cu\d+$", "cuda", regex=True) if len(rows) else ""
    return rows[rows["release"] != ""]


def _with_interpreter(rows: pd.DataFrame) -> pd.Series:
    """A sweep's release named with its interpreter where the framework's releases in that
    sweep ran on more than one (0.11.2 (py3.12)), the oldest interpreter's left plain."""
    python = rows["python"].fillna("").astype(str)
    named = rows["release"].copy()
    for _, group in rows.groupby(["machine", "sweep", "framework"]):
        minors = sorted({v for v in python[group.index] if v}, key=_minor_key)
        for minor in minors[1:]:
            mine = group.index[python[group.index] == minor]
            named[mine] = named[mine] + f" (py{minor})"
    return named


def _minor_key(minor: str) -> tuple[int, ...]:
    return tuple(int(part) for part in minor.split(".") if part.isdigit())


def chain_key(release: str) -> tuple:
    """A release's place in its chain: by version, then its interpreter (a bridge comes
    right after the release on its own interpreter)."""
    version, _, python = release.partition(" (py")
    return (*release_key(version), _minor_key(python.rstrip(")")))


def releases_of(rows: pd.DataFrame) -> list[str]:
    return sorted(rows["release"].unique(), key=chain_key)


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
    it within a build ("release"; "interpreter" where only the Python changed: the bridge),
    and a release's builds against each other ("build": torch's CPU build against its default
    build, what the CUDA libraries cost a CPU user)."""
    pairs = []
    for _, builds in group.groupby("build"):
        chain = releases_of(builds)
        pairs += [(a, b, _kind(a, b)) for a, b in zip(chain, chain[1:], strict=False)]
    public = group["release"].str.partition("+")[0]
    for _, same in group.groupby(public):
        chain = sorted(same["release"].unique())
        pairs += [(a, b, "build") for a, b in zip(chain, chain[1:], strict=False)]
    return pairs


def _kind(older: str, newer: str) -> str:
    same = older.partition(" (py")[0] == newer.partition(" (py")[0]
    return "interpreter" if same else "release"


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
            "since": chain[before[0]],  # the first release of the level before the step
            "before": before[2], "after": after[2], "change": after[2] / before[2] - 1,
            "threshold": threshold, "verdict": _verdict(metric, before[2], after[2], threshold),
            # lasting: the new level holds over two releases or more to the newest
            "persists": after[1] == len(values) and after[1] - after[0] >= 2,
            # at the newest release: whether it lasts, a later release will tell
            "newest": after[0] == len(values) - 1,
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
    # the newest release a sweep measured of each chain: a cell the sweep has not reached
    # under it yet (a sweep resumed later) tells neither what lasts nor what is the newest's
    newest = rows.groupby(keys[:4])["release"].agg(lambda r: releases_of(r.to_frame())[-1])
    for key, group in rows.groupby(keys):
        if len(releases_of(group)) < 3:
            continue
        reached = releases_of(group)[-1] == newest[key[:4]]
        for metric in metrics:
            chain, values, noise = series(group, metric)
            for step in steps_in(chain, values, noise, metric):
                step["persists"] = step["persists"] and reached
                step["newest"] = step["newest"] and reached
                out.append({**dict(zip(keys, key, strict=True)), **step})
    return pd.DataFrame(out)


def _size(metric: str, base: float, new: float) -> str:
    if METRICS[metric].unit == "bytes":
        return f"{(new - base) / MIB:+,.0f} MiB ({new / base - 1:+.0%})"
    return f"{new / base - 1:+.0%} ({base:.3g} -> {new:.3g} {METRICS[metric].unit})"


def beaten(threshold: float) -> str:
    """What a change had to beat: the measured noise, or the floor where the noise was less
    (a floor is no measurement of noise)."""
    if threshold > DEFAULT_FLOOR + 1e-9:
        return f"noise {threshold:.0%}" if threshold >= 0.095 else f"noise {threshold:.1%}"
    return f"noise under the {DEFAULT_FLOOR:.0%} floor"


def _sweeps(n: object) -> str:
    return f", {int(n)} sweeps" if pd.notna(n) and int(n) > 1 else ""


def _counted(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


# A CPU machine named from its family and model (membench.environment.machine_for) is a host
# kind; one named before those facts were kept is a label whose hosts may differ
HOST_KIND = re.compile(r"-f\d+m\d+-")


def _label_caveat(machine: str, rows: pd.DataFrame) -> str:
    if HOST_KIND.search(machine) or (rows["device"] != "cpu").any():
        return ""
    return (
        " This machine is named without its CPU's family and model: a label, not a host kind "
        "(methodology), whose sweeps' hosts may differ, so read its speed verdicts with care."
    )


def _example(r: dict) -> str:
    """One judged change as a reader reads it: metric, cell, size, the sweeps that found it
    and the noise it beat."""
    return (
        f"{METRICS[r['metric']].label}, {r['workload']} {r['strategy']} b{r['batch_size']}, "
        f"{_size(r['metric'], r['base'], r['new'])}{_sweeps(r.get('sweeps'))}, "
        f"{beaten(r['threshold'])}"
    )


SWEEPS_DISAGREE = "sweeps disagree"
PAIR = ["machine", "framework", "kind", "base_release", "new_release"]


def across_sweeps(pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per pair of releases, cell and metric over every sweep that judged it: its
    verdict where they all gave the same, else SWEEPS_DISAGREE (a change one sweep finds and
    another does not is inside the noise between runs); `sweeps`: how many judged it; the
    figures those of the sweep whose change is the median."""
    out = []
    pairs = pairs[pairs["verdict"] != BUSY]  # a speed not judged takes no side
    for _, group in pairs.groupby([*PAIR, *CELL, "metric"], sort=False):
        ranked = group.sort_values("change", na_position="last")
        row = ranked.iloc[(len(ranked) - 1) // 2].to_dict()
        verdicts = set(group["verdict"])
        row["verdict"] = verdicts.pop() if len(verdicts) == 1 else SWEEPS_DISAGREE
        row["sweeps"] = group["sweep"].nunique()
        out.append(row)
    return pd.DataFrame(out)


def _coverage(pairs: pd.DataFrame) -> str:
    """Which workloads how many sweeps measured: "transformer in 3, resnet50 and unet3d in 1"."""
    counts = pairs.groupby("workload")["sweep"].nunique()
    said = []
    for n in sorted(set(counts), reverse=True):
        names = sorted(counts[counts == n].index)
        said.append(f"{' and '.join(names)} in {n}")
    return ", ".join(said)


def fullest_sweep(frame: pd.DataFrame, machine: str) -> str:
    """The sweep a machine's summary shows: the one with the most records (a part measured
    later for a few cells does not replace the whole), the newest among equals."""
    rows = sweep_rows(frame)
    rows = rows[rows["machine"] == machine]
    size = rows.groupby("sweep").agg(n=("path", "nunique"), newest=("started_at", "max"))
    return str(size.sort_values(["n", "newest"]).index[-1])


@dataclass
class ReleaseSummary:
    """A machine's release verdicts as the pages show them: the rule and coverage, one row
    per pair of releases, and the lasting changes (a heading sentence, then one per item)."""

    intro: str
    table: pd.DataFrame
    lasting: list[str]


SUMMARY_COLUMNS = [
    "framework", "releases", "regressed", "improved", "unchanged", "sweeps disagree",
    "largest change (metric, cell, size, sweeps, noise)",
]  # fmt: skip


def release_summary(
    frame: pd.DataFrame, machine: str, pairs: pd.DataFrame | None = None
) -> ReleaseSummary | None:
    """Per framework, each release against the one before it (counts, and the largest change
    with its noise) over every sweep, a release's builds against each other, then the
    releases that brought a lasting change; None where the machine holds no sweep. pairs:
    pair_verdicts(frame), where the caller has it already (a few seconds a sweep)."""
    pairs = pair_verdicts(frame) if pairs is None else pairs
    if pairs.empty:
        return None
    pairs = pairs[(pairs["machine"] == machine) & (pairs["metric"] != "status")]
    if pairs.empty:
        return None
    mine = sweep_rows(frame)
    mine = mine[mine["machine"] == machine]
    runs = mine.groupby(["sweep", "release", *CELL])["path"].nunique()
    spread = f"{runs.min()}-{runs.max()}" if runs.min() != runs.max() else f"{runs.max()}"
    sweeps = pairs["sweep"].nunique()
    intro = (
        f"Each release against the one before it within each sweep (every release measured "
        f"cell by cell on this host, {spread} run{'s' if runs.max() > 1 else ''} a cell), by "
        "`membench compare`'s rule: a change counts beyond the larger of 5% (the floor) and the "
        "noise measured on either side (the runs' range, the step times' spread), and beyond "
        "the metric's absolute minimum (16 MiB of host memory, 0.1 samples/s). "
        f"{sweeps} sweep{'s' if sweeps > 1 else ''}: {_coverage(pairs)}. A cell measured in "
        "several sweeps counts as changed only where every sweep found the change; where they "
        "did not, the sweeps disagree (the change is inside the noise between runs)."
        f"{_label_caveat(machine, mine)}"
    )
    rows = []
    judged = across_sweeps(pairs)
    for (framework, kind, base, new), group in judged.groupby(
        ["framework", "kind", "base_release", "new_release"], sort=False
    ):
        counts = group["verdict"].value_counts()
        changed = group[group["verdict"].isin([REGRESSION, IMPROVEMENT])]
        largest = "-"
        if len(changed):
            r = changed.loc[changed["change"].abs().idxmax()]
            largest = f"{r['verdict']}: {_example(r)}"
        what = f"{base} -> {new}" + {
            "build": " (builds)",
            "interpreter": ", the bridge: the interpreter alone",
        }.get(kind, "")
        counted = [counts.get(v, 0) for v in (REGRESSION, IMPROVEMENT, UNCHANGED, SWEEPS_DISAGREE)]
        rows.append([framework, what, *counted, largest])
    table = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    return ReleaseSummary(intro, table, _lasting(frame, machine))


def summary_lines(
    frame: pd.DataFrame, machine: str, pairs: pd.DataFrame | None = None
) -> list[str]:
    """The summary page's section (release_summary in Markdown). At most a screen."""
    found = release_summary(frame, machine, pairs)
    if found is None:
        return []
    head = "| " + " | ".join(SUMMARY_COLUMNS) + " |"
    rows = ["| " + " | ".join(str(v) for v in r) + " |" for r in found.table.to_numpy()]
    lasting = ["", found.lasting[0]]
    lasting += ["", *(f"- {item}" for item in found.lasting[1:])] if len(found.lasting) > 1 else []
    intro = f"{found.intro} Every sweep's changes: the versions page."
    return [intro, "", head, "|" + "---|" * len(SUMMARY_COLUMNS), *rows, *lasting]


def _steps_across_sweeps(frame: pd.DataFrame, machine: str) -> pd.DataFrame:
    """The steps asv's detection finds in a machine's sweeps, each kept where every sweep
    that measured its cell and metric along three releases or more found the same step;
    `sweeps`: how many did. Its figures, and whether it lasts or is the newest release's, are
    those of the sweep with the longest chain of releases."""
    firsts = first_releases(frame)
    if firsts.empty:
        return firsts
    firsts = firsts[(firsts["machine"] == machine) & (firsts["verdict"] != UNCHANGED)]
    rows = sweep_rows(frame)
    rows = rows[(rows["machine"] == machine) & (rows["status"] == "ok") & rows["value"].notna()]
    series = ["framework", "build", *CELL, "metric"]
    chains = rows.groupby(["sweep", *series])["release"].nunique().rename("chain").reset_index()
    measured = chains[chains["chain"] >= 3].groupby(series)["sweep"].nunique().rename("measured")
    step = [*series, "release", "verdict"]
    found = firsts.groupby(step)["sweep"].nunique().rename("sweeps").reset_index()
    found = found.merge(measured.reset_index(), on=series, how="left").fillna({"measured": 0})
    kept = found[found["sweeps"] == found["measured"]].drop(columns="measured")
    firsts = firsts.merge(chains, on=["sweep", *series], how="left").fillna({"chain": 0})
    figures = firsts.sort_values(["chain", "change"], ascending=[False, True]).drop_duplicates(step)
    return kept.merge(figures.drop(columns=["sweep", "chain"]), on=step)


def _lasting(frame: pd.DataFrame, machine: str) -> list[str]:
    """The releases that brought a change still there at the newest release (the new level
    over two releases or more), and the newest release's own steps, by asv's step detection,
    each found by every sweep that measured its cell: a heading sentence, then one line each
    (counts and the largest)."""
    steps = _steps_across_sweeps(frame, machine)
    if len(steps):
        steps = steps[steps["persists"] | steps["newest"]]
    if steps.empty:
        return ["No change lasts along a chain of three releases or more (asv's step detection "
                "over each cell's releases, every sweep that measured it)."]  # fmt: skip
    lines = ["Lasting changes and the release that brought them (asv's step detection over "
             "each cell's releases, in every sweep that measured it): the new level holds over "
             "two releases or more to the newest, or is the newest release's own. A change is "
             "sized from the level before the step (the median over the releases named) to "
             "the level after it, so it may differ from the table's figure, which sets a "
             "release beside the one before it alone:"]  # fmt: skip
    steps = steps.assign(_order=steps["release"].map(chain_key))
    for (framework, _, release, verdict), group in steps.groupby(
        ["framework", "_order", "release", "verdict"]
    ):
        r = group.loc[group["change"].abs().idxmax()]
        example = _example({**r, "base": r["before"], "new": r["after"]})
        level = r["previous"] if r["since"] == r["previous"] else f"{r['since']}-{r['previous']}"
        newest = group["newest"].all()
        lasting = "; whether it lasts, a later release will tell" if newest else ""
        what = f"{framework} {release}" + (" (the newest)" if newest else "")
        if _kind(str(r["previous"]), release) == "interpreter":
            what += " (the interpreter changed, not the release)"
        lines.append(
            f"{what}: {_counted(len(group), verdict)}, largest {example}, from the level of "
            f"{level}{lasting}"
        )
    return lines


def reference_tables(
    frame: pd.DataFrame, machine: str, pairs: pd.DataFrame | None = None
) -> dict[str, pd.DataFrame]:
    """Every judged change per sweep and framework (the versions page); pairs as in
    release_summary."""
    pairs = pair_verdicts(frame) if pairs is None else pairs
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
            noise=group["threshold"].map(_noise_shown),
        )[["releases", *CELL, "metric", "base", "new", "change", "noise", "verdict"]]
        out[f"{framework}, sweep {sweep}"] = table.rename(columns={"batch_size": "batch"})
    return out


def _noise_shown(threshold: float) -> str:
    if pd.isna(threshold):
        return ""
    return f"{threshold:.1%}" if threshold > DEFAULT_FLOOR + 1e-9 else f"under {DEFAULT_FLOOR:.0%}"


def _shown(metric: str, value: object) -> str:
    if isinstance(value, str):
        return value
    if metric in METRICS and METRICS[metric].unit == "bytes":
        return f"{float(value) / MIB:,.0f} MiB"
    return f"{float(value):.3g}"
