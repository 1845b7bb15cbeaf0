"""The decision table: per workload and memory budget, what fits and how fast it trains.

One row per framework x strategy searched by `membench capacity`: the largest batch within
the budget (with its margin where the boundary was measured against its noise), samples/s at
that batch (none from a busy host), and against the same framework's reference strategy
(baseline for training, infer for inference) the memory and the speed at one batch the
preset's grid measured both at, each signed one way everywhere. A row that looks wrong (no more
samples than its baseline, or far slower) says why from the records; a search that did not
end ok says why. The Markdown pages, the HTML report and the notebook all show these tables.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.families import family, strategy_order
from analysis.labels import metric_label
from analysis.modes import INFER, mode_of, modes
from analysis.schema import MIB, PRIMARY_MEMORY, device_kind
from membench.fitting import linear_fit
from membench.metrics import ANY_RESERVE, BUSY_METRIC, THROUGHPUT, busy_share
from membench.records import LEFT_OUT, UNSETTLED

# (machine, workload, preset, budget in GiB): a preset fixes the input size, so the same budget
# under two presets is two questions
DecisionKey = tuple[str, str, str, float]
# the table's two parts, by the rows' modes (analysis.modes); a table row's part is its PART
TRAINING, INFERENCE = "training", "inference"
PART = "part"
REFERENCE = {TRAINING: "baseline", INFERENCE: "infer"}  # what a row is compared against
# factors within 2% of 1 read "same", and a speed within 2% of the highest ties: a floor
# under the runs' spread (three runs show it roughly; an answer's own runs spread by 3% of
# their median in the middle of the committed searches)
SAME_SPEED = 0.02
BEST_RULE = (
    "best: each framework's training strategy with the highest samples/s at its own largest "
    "batch; a strategy whose samples/s reaches the highest one's slowest run, or comes within "
    f"{SAME_SPEED:.0%} of it, ties with it and 'tied' marks it; a tie goes to the larger "
    "batch, then to the strategy first in the table's order"
)
LARGEST, MARGIN, SPEED, BEST = "largest batch", "margin", "samples/s at it", "best"
SPEED_RUNS = "speed runs"  # the samples/s of the answer's quiet runs: SPEED is their median
NOTE = "note"  # why a row is odd, the search's limits, a busy host: in measured terms
MEMORY_VS, SPEED_VS = "memory vs baseline", "speed vs baseline"
MEMORY_LAYER = "memory layer"  # a table's attrs: the layer its memory vs baseline is on
SLOW = 0.5  # under half the reference's samples/s: the row says why
# A next batch whose peak lies this many times its samples' cost above the answer's, beyond
# the runs' spread, is a step in the peak (an allocator growing its reserve, say), not a
# sample's cost: the row says so
JUMP = 4.0
# where a framework reports what its allocator holds: the step's cause, where it is one
RESERVE_METRICS = ANY_RESERVE


def memory_header(batch: int | None) -> str:
    return MEMORY_VS + (f" at batch {batch}" if batch else "")


def speed_header(batch: int | None) -> str:
    return SPEED_VS + (f" at batch {batch}" if batch else "")


def budget_label(gib: float) -> str:
    """1 GiB, 1.5 GiB; 800 MiB where GiB would need more than two decimals."""
    return f"{gib:g} GiB" if round(gib, 2) == gib else f"{gib * 1024:.0f} MiB"


def where(key: DecisionKey) -> str:
    machine, workload, preset, gib = key
    return f"{workload}, preset {preset}, budget {budget_label(gib)}"


def where_on(key: DecisionKey) -> str:
    """where(key) with its machine, for a page that holds several host kinds' tables."""
    return f"{where(key)}, on {key[0]}"


def _part(row_mode: str) -> str:
    """The table's part for a row of this mode (analysis.modes)."""
    return INFERENCE if row_mode == INFER else TRAINING


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
        REFERENCE[_part(mode[c])] for c in wide[cell].itertuples(index=False, name=None)
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


def _ties_with(row: pd.Series, top: pd.Series) -> bool:
    """Whether a row's samples/s (its runs' median) lies within the fastest row's runs, so
    that a run of the fastest was no faster, or within SAME_SPEED of it (BEST_RULE); one high
    run of its own does not make a row tie."""
    runs = top.get(SPEED_RUNS, ())
    slowest = min(runs) if isinstance(runs, tuple) and len(runs) >= 2 else top[SPEED]
    return bool(row[SPEED] >= min(slowest, top[SPEED] * (1 - SAME_SPEED)))


def _best(table: pd.DataFrame) -> pd.Series:
    """'best' on each framework's best training row, 'tied' on the rows tied with it
    (BEST_RULE), "" elsewhere."""
    ok = table[(table[PART] == TRAINING) & table[LARGEST].notna() & table[SPEED].notna()]
    best = pd.Series("", index=table.index)
    for _, rows in ok.groupby("framework"):
        top = rows.loc[rows[SPEED].idxmax()]
        tied = rows[[_ties_with(row, top) for _, row in rows.iterrows()]]
        order = {s: i for i, s in enumerate(strategy_order(tied["strategy"]))}
        ranked = tied.assign(order=tied["strategy"].map(order)).sort_values(
            [LARGEST, "order"], ascending=[False, True], kind="stable"
        )
        best[ranked.index] = "tied"
        best[ranked.index[0]] = "best"
    return best


def _get(row: Any, name: str, default: Any = math.nan) -> Any:
    """A capacity row's field; frames older than the loader's details lack some."""
    value = getattr(row, name, default)
    return default if value is None else value


def _known(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _size(mib: float) -> str:
    """850 MiB; 1.21 GiB from 1 GiB up."""
    return f"{mib / 1024:.2f} GiB" if abs(mib) >= 1024 else f"{mib:.0f} MiB"


def _mib(mib: float) -> str:
    """A margin's MiB: one decimal below 10 (a boundary is often decided by a few MiB), two
    significant figures below 0.1 (a batch over by 28 KiB is not over by 0.0)."""
    if 0 < abs(mib) < 0.1:
        return f"{mib:.2g} MiB"
    return f"{mib:.1f} MiB" if abs(mib) < 10 else f"{mib:.0f} MiB"


def _busy(row: Any) -> float | None:
    """The foreign CPU share behind a search's answer where it is over the busy threshold
    (its speed is then the other processes' as much as its own), else None (also unknown)."""
    share = _get(row, "foreign_cpu_share_at_fit")
    return busy_share({BUSY_METRIC: float(share)}) if _known(share) else None


def busy_note(share: float) -> str:
    return f"host busy: {share:.0%} foreign CPU"


def at_maximum(batch: int) -> str:
    """An answer at the search's largest batch is a lower bound: nothing larger was tried."""
    return f"search's maximum reached (>= {batch})"


def published_speed(row: Any) -> float:
    speed = _get(row, "throughput_at_capacity")
    ok = row.status == "ok" and _known(speed) and (row.largest_batch or 0) > 0
    return float(speed) if ok and _busy(row) is None else math.nan


def _told_apart(a: float, b: float) -> tuple[str, str]:
    """Two MiB figures a reader compares, with the decimals that tell them apart where _mib
    would write them alike (a 71.9 MiB margin clears a 71.5 MiB spread; "72" and "72" do not
    say which is larger)."""
    if _mib(a) != _mib(b) or a == b:
        return _mib(a), _mib(b)
    digits = next((d for d in range(1, 4) if f"{a:.{d}f}" != f"{b:.{d}f}"), 3)
    return f"{a:.{digits}f} MiB", f"{b:.{digits}f} MiB"


def margin_text(row: Any) -> str:
    """The answer against its noise, from the boundary's repeats: what is left below the
    budget, the next batch's excess, the runs' spread; "within noise" where the spread is
    larger than the margin. Empty for results without it (written before the repeats)."""
    margin = _get(row, "margin_mib")
    if not _known(margin) or not (_get(row, "largest_batch", 0) or 0) > 0:
        return ""
    spread, over = _get(row, "spread_mib"), _get(row, "over_mib")
    noisy = _known(spread) and spread > margin
    said, spread_said = _told_apart(margin, spread) if _known(spread) else (_mib(margin), "")
    text = ("within noise: " if noisy else "") + f"{said} to spare"
    nxt = _get(row, "smallest_non_fit")
    if _known(over) and _known(nxt):
        text += f"; {int(nxt)} {_next_batch_said(row, over)}"
    if _known(spread):
        text += f" (runs spread {spread_said})"
    return text


def _next_batch_said(row: Any, over: float) -> str:
    """Why the next batch is no answer: over the budget (on average, or in some of its
    runs), or, where every run fitted, put down by the noise rule (its room was less than
    the spread at its own boundary, which may be wider than the answer's)."""
    runs, above = _get(row, "next_runs", 0) or 0, _get(row, "next_runs_over", 0) or 0
    highest = _get(row, "next_highest_over_mib")
    if not runs or not _known(highest):  # a file older than these fields: the mean's sign
        return f"over by {_mib(over)}" if over >= 0 else f"under by {_mib(-over)} on average"
    runs, above = int(runs), int(above)
    if _next_put_down(row):  # its margin was under the spread at its own boundary
        said = f"fits all {runs} runs ({_mib(-highest)} to spare"
        if (own := _boundary_spread(row)) is not None:
            said += f", under the {_mib(own[0])} spread at {own[1]} and {own[2]}"
        return said + "), put down by the noise rule"
    if above < runs:
        return f"over in {above} of {runs} runs, by up to {_mib(highest)}"
    return f"over by {_mib(over)}"


CAPACITY_TITLE = "Capacity: largest batch within the budget"
CURVE_TITLE = "Capacity at your own budget: fixed and per-sample cost from the probes"
_SEARCH_LINE = ["fit_fixed_mib", "fit_per_sample_mib", "fit_r2"]
# A search's own line is shown only where its probes pin its per-sample cost down to this
# share (one standard error): probes bunched at the boundary within their runs' noise draw
# the line through that noise (fixed -662 MiB, R² 0.45 from batches 212-220), while noise-free
# peaks (glibc's mmap threshold fixed) give a sound line from a few batches. capacity_curve's
# lines over every budget are the ones a reader applies.
LINE_ERROR = 0.10
SEARCH_LINE_RULE = (
    "Fixed and per-sample MiB, fit R²: the line through the search's own probes, repeats "
    f"included; '-' where three or more of them leave its per-sample cost uncertain by over "
    f"{LINE_ERROR:.0%} (one standard error), since probes bunched at the boundary give a line "
    f"through their noise. The lines a reader applies, over every budget's probes, are under "
    f"'{CURVE_TITLE}' where the probes give one."
)


def _line_holds(points: Sequence[tuple[int, float]]) -> bool:
    """Whether a least-squares line through (batch, peak) probes knows its slope to LINE_ERROR
    (its standard error over its size). Fewer than three probes cannot tell: they hold."""
    batches, peaks = zip(*points, strict=True) if points else ((), ())
    if len(batches) < 3:
        return True
    if len(set(batches)) == 1:
        return False
    _, slope, r2 = linear_fit(batches, peaks)
    # (standard error / slope)^2 = (1 - R²) / (R² (n - 2)) for a least-squares line
    return slope != 0 and 1 - r2 <= LINE_ERROR**2 * r2 * (len(batches) - 2)


def _own_line(row: Any) -> bool:
    """Whether a search's own fitted line (fit_*) may be quoted: its probes do not show it
    undetermined (_line_holds), or the frame is older than the probes' peaks."""
    points = _get(row, "probe_peaks", None)
    return points is None or _line_holds(points)


def _runs(row: Any) -> dict[int, list[float]]:
    """The peaks of each batch's runs in the search's probes, in bytes."""
    runs: dict[int, list[float]] = {}
    for batch, peak in _get(row, "probe_peaks", ()) or ():
        runs.setdefault(int(batch), []).append(peak)
    return runs


def _boundary_spread(row: Any) -> tuple[float, int, int] | None:
    """The spread that put the next batch down, with the two batches: the larger max - min of
    its runs and of the runs of the batch above it measured again (None where the probes do
    not show it)."""
    runs = _runs(row)
    nxt = int(_get(row, "smallest_non_fit"))
    above = min((b for b, v in runs.items() if b > nxt and len(v) > 1), default=None)
    if len(runs.get(nxt, ())) < 2 or above is None:
        return None
    return max(max(v) - min(v) for v in (runs[nxt], runs[above])) / MIB, nxt, above


# Where a backend's strategy notes say the dtype its kernels compute in (torch autocast,
# JAX's compute dtype, a half model, Jittor's half inputs), most specific first.
DTYPE_NOTES = ("compute_dtype", "autocast_dtype", "model_dtype", "input_dtype")


def _dtype(notes: object) -> tuple[str, str] | None:
    if not isinstance(notes, dict):
        return None
    return next(((k, str(notes[k])) for k in DTYPE_NOTES if notes.get(k)), None)


def _runs_in(row: Any, ref: Any) -> str:
    """Says "runs in float16 (autocast_dtype; baseline float32)": the dtype the row's record
    reports, beside its reference's where that differs."""
    mine = _dtype(_get(row, "strategy_notes", {}))
    if mine is None:
        return ""
    theirs = _dtype(_get(ref, "strategy_notes", {}))
    beside = f"; {ref.strategy} {theirs[1]}" if theirs and theirs[1] != mine[1] else ""
    return f"runs in {mine[1]} ({mine[0]}{beside})"


def _costs(row: Any, ref: Any) -> str:
    """The row's fixed and per-sample cost against its reference's: both strategies' lines over
    their probes at every budget where both have one (with_cost_lines), else the linear fits
    of their searches' own probes where those hold (_own_line); else their peaks at their
    answers."""
    both = all(_known(_get(r, "line_per_sample_mib")) for r in (row, ref))
    fixed_col, per_col = ("line_fixed_mib", "line_per_sample_mib") if both else (
        "fit_fixed_mib", "fit_per_sample_mib")  # fmt: skip
    fixed, per = _get(row, fixed_col), _get(row, per_col)
    ref_fixed, ref_per = _get(ref, fixed_col), _get(ref, per_col)
    if not both and not (_own_line(row) and _own_line(ref)):
        fixed = per = math.nan  # a line through noise: the peaks at the answers instead
    name = ref.strategy
    if all(_known(v) for v in (fixed, per, ref_fixed, ref_per)):
        over = f" (lines over {int(_get(row, 'line_budgets'))} budgets' probes)" if both else ""
        text = (
            f"fixed {_size(fixed)} vs {name} {_size(ref_fixed)}; "
            f"{per:.1f} MiB/sample vs {ref_per:.1f}{over}"
        )
        if fixed > row.budget_gib * 1024:
            text += " (over the budget before any sample)"
        return text
    peak, ref_peak = _get(row, "peak_at_fit_mib"), _get(ref, "peak_at_fit_mib")
    if _known(peak) and _known(ref_peak):
        return (
            f"peak {_size(peak)} at {int(row.largest_batch)} vs {name} {_size(ref_peak)} "
            f"at {int(ref.largest_batch)}"
        )
    return "no cost of both to compare (no line their probes pin, no peak at an answer)"


def _odd(row: Any, ref: Any, factor: float, batch: int | None) -> list[str]:
    """Why a row looks wrong, in measured terms: it fits fewer samples than its reference
    strategy, or no more (its costs against the reference's), or runs at under SLOW of its speed (at
    their answers, else at the comparison batch); either way the dtype its record reports."""
    if ref is None or row is ref or ref.status != "ok" or row.status != "ok":
        return []
    name, out = ref.strategy, []
    mine, theirs = int(row.largest_batch or 0), int(ref.largest_batch or 0)
    if theirs > 0 and mine < theirs:
        fewer = f"{name} fits {theirs}" if mine == 0 else f"fits {mine}, {name} {theirs}"
        out.append(f"{fewer}: {_costs(row, ref)}")
    elif (
        theirs > 0
        and mine == theirs
        and row.strategy != name
        and _known(_get(row, "smallest_non_fit"))
    ):  # a strategy meant to save memory that saves none (not one that reached the maximum)
        out.append(f"fits no more than {name} ({theirs}): {_costs(row, ref)}")
    speed, ref_speed = published_speed(row), published_speed(ref)
    if _known(speed) and _known(ref_speed) and speed < SLOW * ref_speed:
        out.append(
            f"{ref_speed / speed:.1f}x slower than {name} "
            f"({speed:.3g} vs {ref_speed:.3g} samples/s at their answers)"
        )
    elif not _known(speed) and _known(factor) and factor < SLOW:
        out.append(f"{1 / factor:.1f}x slower than {name} at batch {batch}")
    if out:
        out.append(_runs_in(row, ref))
        micro = (_get(row, "strategy_notes", {}) or {}).get("micro_batch")
        if micro:
            out.append(f"micro-batch {micro}")
    return [n for n in out if n]


def reserves(probes: pd.DataFrame | None) -> pd.DataFrame:
    """Per capacity run (its machine and folder: one commit's folder name recurs on every
    host it measured), framework, strategy and batch, what the framework's allocator held
    (RESERVE_METRICS) in the batch's first measurement, in MiB, and its metric
    (load_capacity_probes' records)."""
    columns = ["machine", "run", "framework", "strategy", "batch_size", "metric", "reserve_mib"]
    if probes is None or probes.empty:
        return pd.DataFrame(columns=columns)
    rows = probes[probes["metric"].isin(RESERVE_METRICS) & (probes["status"] == "ok")]
    folders = rows["path"].map(lambda p: Path(p).parents[1])  # capacity/<m>/<run>/probes/
    return rows.assign(
        machine=folders.map(lambda f: f.parent.name),
        run=folders.map(lambda f: f.name),
        reserve_mib=rows["value"] / MIB,
    )[columns]


def _step_in_peak(row: Any, held: pd.DataFrame) -> str:
    """Where the next batch's peak lies JUMP times what its extra samples cost above the
    answer's (the means of their runs) beyond the runs' spread: by how much, and the
    framework's reserve at both where its search's records hold one. Empty otherwise, and
    where the boundary was measured once (no spread: a step cannot be told from noise)."""
    runs = _runs(row)
    nxt, mine = _get(row, "smallest_non_fit"), int(_get(row, "largest_batch", 0) or 0)
    per = next((v for v in (_get(row, "line_per_sample_mib"), _get(row, "fit_per_sample_mib"))
                if _known(v) and v > 0), None)  # fmt: skip
    spread = _get(row, "spread_mib")
    if not _known(nxt) or per is None or not _known(spread) or not runs.get(mine):
        return ""
    nxt = int(nxt)
    if not runs.get(nxt):
        return ""
    jump, more = (np.mean(runs[nxt]) - np.mean(runs[mine])) / MIB, nxt - mine
    if jump - spread <= JUMP * per * more:
        return ""
    samples = "1 more sample costs" if more == 1 else f"{more} more samples cost"
    text = (
        f"{nxt} peaks {_mib(jump)} above {mine}, {jump / (per * more):.1f}x what {samples} "
        f"({per:.1f} MiB/sample): a jump in the peak, not a sample's cost"
    )
    mine_held = held[
        (held["machine"] == _get(row, "machine", "")) & (held["run"] == _get(row, "run", ""))
        & (held["framework"] == row.framework) & (held["strategy"] == row.strategy)
    ]  # fmt: skip
    # the reserve on the budget's side: the host's for a host budget, else the device's
    host = "host" in str(_get(row, "budget_layer", ""))
    for metric in (m for m in RESERVE_METRICS if ("_cpu_" in m) == host):
        at = mine_held[mine_held["metric"] == metric].set_index("batch_size")["reserve_mib"]
        if mine in at.index and nxt in at.index:
            return text + f"; {metric} {at[mine]:,.0f} MiB at {mine}, {at[nxt]:,.0f} at {nxt}"
    return text


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
            else _none_fits(r) if none_fits
            else f"{r.status}: {r.reason}".rstrip(": "),
        ]  # fmt: skip
        if ok and (share := _busy(r)) is not None:
            notes.append(busy_note(share))
        part = _part(mode_of(_get(r, "mode", ""), r.strategy))
        notes += _odd(r, answers.get((r.framework, REFERENCE[part])), factor, batch)
        if ok:
            notes.append(_step_in_peak(r, held))
        rows.append({
            PART: part, "framework": r.framework, "strategy": r.strategy,
            "family": family(r.strategy),
            LARGEST: int(r.largest_batch) if ok else (0 if none_fits else pd.NA),
            MARGIN: margin_text(r) if ok else "",
            SPEED: published_speed(r),
            SPEED_RUNS: _get(r, "speed_runs_at_fit", ()) if ok else (),
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
        _part=table[PART].map({TRAINING: 0, INFERENCE: 1}), _order=table["strategy"].map(order)
    )
    table = table.sort_values(["_part", "framework", "_order"], kind="stable")
    table = table.drop(columns=["_part", "_order"]).reset_index(drop=True)
    table.insert(table.columns.get_loc(SPEED), BEST, _best(table))
    return table


def latest_searches(capacity: pd.DataFrame) -> pd.DataFrame:
    """The same search in several runs: the latest run's (_by_date), except that a settled
    search wins over an unsettled one at any date. Every table and sentence picks by it."""
    keys = ["machine", "workload", "preset", "budget_gib", "framework", "strategy"]
    settled = capacity["status"] != UNSETTLED
    ranked = _by_date(capacity.assign(_settled=settled), first=["_settled"])
    return ranked.drop_duplicates(keys, keep="last").drop(columns="_settled")


def _by_date(capacity: pd.DataFrame, first: list[str] | None = None) -> pd.DataFrame:
    """The searches, oldest run first by analysis.loader's run_at (the folder's name, which
    ends in a commit's hash, only breaks a tie); `first`: columns that order before it."""
    return capacity.sort_values([*(first or []), "run_at", "run"], kind="stable")


# A strategy's line over its searches' probes at every budget of a preset (capacity_curve's):
# what a row's note compares, since one search's probes span a few batches around its answer,
# whose noise tilts its own line (JAX's U-Net baseline within 1.25 GiB: 246 MiB fixed and 45.8
# a sample over its probes, 859 and 17.9 over both budgets').
LINE_KEYS = ["machine", "workload", "preset", "budget_layer", "framework", "strategy"]


def with_cost_lines(searches: pd.DataFrame) -> pd.DataFrame:
    """The searches with line_fixed_mib and line_per_sample_mib: each strategy's line over the
    probes of its ok searches at every budget of the preset (NaN with probes at fewer than
    two budgets: the search's own fit then stands), and line_budgets, how many budgets."""
    lines = {}
    ok = searches[searches["status"] == "ok"]
    if "probe_peaks" in ok.columns:
        for key, group in ok.groupby(LINE_KEYS, sort=False):
            if group["budget_gib"].nunique() >= 2 and (line := _line(group["probe_peaks"])):
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
    rows first. `view` is analysis.loader.latest()'s; `capacity` analysis.loader.load_capacity's;
    `probes` (load_capacity_probes') gives the allocators' reserves a step in a peak is told
    with. The same search in two runs: the later run wins (latest_searches)."""
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
    now = _by_date(per_budget).drop_duplicates(["framework", "strategy"], keep="last")
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


def _next_put_down(row: Any) -> bool:
    """Whether the next batch fitted every one of its runs (the noise rule put it down)."""
    return (_get(row, "next_runs", 0) or 0) > 0 and _get(row, "next_runs_over", 0) == 0


def _none_fits(row: Any) -> str:
    smallest = int(row.smallest_non_fit)
    if _next_put_down(row):
        return (
            f"none stands: batch {smallest}, the smallest, fits every run but with less room "
            "than the runs' spread"
        )
    return f"none fits: batch {smallest}, the smallest tried, is over the budget"


# a note longer than this is cut (the longest committed one, 295: Jittor's mmap-threshold
# Transformer at 2 GiB, whose reason is its last clause, is whole); the reference pages and
# the capacity files have the reasons whole
WHY_CHARS = 320


def shortened(reason: str, limit: int = WHY_CHARS) -> str:
    """The reason within limit characters with "…" where it was cut: after its last whole
    clause ("; ") that fits, where that keeps over half of it, else after its last whole
    word."""
    if len(reason) <= limit:
        return reason
    within = reason[: limit - 1]  # a "; " starting at limit - 3 still leaves room
    clause = within.rfind("; ")  # for "; …" after it
    if clause > limit // 2:
        return reason[:clause] + "; …"
    word = within.rfind(" ")  # " …" after it
    return (reason[:word] if word > 0 else reason[: limit - 2]).rstrip(" ;,") + " …"


def memory_text(pct: float) -> str:
    """-23% uses less memory, +13% more: the sign every table of the suite gives."""
    if pd.isna(pct):
        return "-"
    return "0%" if round(pct) == 0 else f"{round(pct):+d}%"


def speed_text(factor: float) -> str:
    """A speed factor said the way it reads: "2.04x faster", "1.30x slower", "same"."""
    if pd.isna(factor) or factor <= 0:
        return "-"
    if abs(factor - 1) <= SAME_SPEED:
        return "same"
    return f"{factor:.2f}x faster" if factor > 1 else f"{1 / factor:.2f}x slower"


def formatted(table: pd.DataFrame) -> pd.DataFrame:
    """The table as text for a page: memory signed in %, speed as faster/slower, blanks as
    "-", long notes cut (the workload's reference page and the capacity page have them
    whole)."""
    out = table.drop(columns=["family", SPEED_RUNS]).astype(object)
    layer = table.attrs.get(MEMORY_LAYER)
    for column in out.columns:
        values = table[column]
        if column.startswith(MEMORY_VS):
            out[column] = values.map(memory_text)
        elif column.startswith(SPEED_VS):
            out[column] = values.map(speed_text)
        elif column == SPEED:
            runs = table[SPEED_RUNS]
            out[column] = [speed_with_runs(v, r) for v, r in zip(values, runs, strict=True)]
        elif column == LARGEST:
            out[column] = values.map(lambda v: "-" if pd.isna(v) else str(int(v)))
        elif column == NOTE:
            out[column] = values.map(shortened)
    if layer:
        out = out.rename(columns={c: f"{c} ({layer})" for c in out.columns
                                  if str(c).startswith(MEMORY_VS)})  # fmt: skip
    return out


def speed_figure(value: float) -> str:
    """Samples/s to three significant figures, never in exponent form (GPUs reach 1,050)."""
    if pd.isna(value):
        return "-"
    if not value:
        return "0"
    decimals = max(0, 2 - math.floor(math.log10(abs(value))))  # three significant figures
    return f"{float(f'{value:.3g}'):,.{decimals}f}"


def speed_with_runs(speed: float, runs: object) -> str:
    """The published samples/s with its runs' range where it has two or more: "3.90
    (3.41-4.49)"."""
    if pd.isna(speed) or not isinstance(runs, tuple) or len(runs) < 2:
        return speed_figure(speed)
    return f"{speed_figure(speed)} ({speed_figure(min(runs))}-{speed_figure(max(runs))})"


def by_mode(table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The training rows and the inference rows, each without the part column (and the
    inference rows without the best mark, which ranks training strategies only)."""
    parts = {}
    for part in (TRAINING, INFERENCE):
        rows = table[table[PART] == part].drop(columns=PART)
        if part == INFERENCE:
            rows = rows.drop(columns=BEST)
        if len(rows):
            parts[part] = rows.reset_index(drop=True)
    return parts


SAME_NOTE = "Columns as in the table above."


def notes_once(tables: Iterable[pd.DataFrame]) -> list[str]:
    """Each table's note, or SAME_NOTE where the table before it said the same."""
    said: list[str] = []
    last = None
    for table in tables:
        told = note(table)
        said.append(SAME_NOTE if told == last else told)
        last = told
    return said


def note(table: pd.DataFrame) -> str:
    """What the columns mean, for the text above a decision table."""
    batch = next((c.removeprefix(f"{MEMORY_VS} at batch ").split(" (")[0] for c in table.columns
                  if c.startswith(f"{MEMORY_VS} at batch ")), None)  # fmt: skip
    margin = (
        " Margin: the budget less the answer's highest peak over its runs; the next batch: "
        "its mean peak over the budget, or in how many runs it went over, or, where every run "
        "fitted, its room (it was put down by the rule below); and the runs' largest spread "
        "(max - min). An answer stands only with that spread to spare (searches before that "
        "rule: within noise where the spread exceeds the margin)."
        if MARGIN in table.columns
        else ""
    )
    compared = (
        " Memory and speed vs baseline: against the same framework's baseline (training) or "
        f"infer (inference) on the preset's own cells, at batch {batch}, the batch of the "
        "preset's grid with the most pairs measured; memory is the measured steps' peak "
        "(steady state) on the layer its header names, which may not be the budget's (a "
        "GPU's allocated peak beside torch's reserve: the reserve holds more), signed "
        "-23% = less memory, +13% = more; speed as a factor, faster or "
        f"slower (same within {SAME_SPEED:.0%})."
        if batch
        else " No memory or speed vs baseline: this preset measured no strategy beside its "
        "baseline at a common batch (its searches' fitted costs are on the capacity page)."
    )
    return (
        "Largest batch: the capacity search's verified answer; samples/s measured at it "
        "(the median of its runs on a quiet host, their range in brackets; none where the host "
        f"was busy).{margin}{compared} Note: why a row fits no more "
        "samples than its baseline or runs at under half its speed (fixed and per-sample cost "
        "fitted over the probes, at every budget where the preset searched two or more, the "
        "dtype the record reports); 'search's maximum reached "
        f"(>= N)': nothing larger was tried. {BEST_RULE}."
    )


CAPACITY_REFERENCE = [
    "machine", "workload", "preset", "budget_gib", "framework", "strategy", "measured_by",
    "in_decision_table", "search",
    "prediction_basis", "predicted_batch", "largest_batch", "smallest_non_fit", "probes",
    "bisection_probes", "throughput_at_capacity", "fit_fixed_mib", "fit_per_sample_mib",
    "fit_r2", "repeats", "margin_mib", "over_mib", "spread_mib", "steady_peak_at_fit_mib",
    "foreign_cpu_share_at_fit", "status", "reason",
]  # fmt: skip
# columns of the boundary's repeats: left out where no search has them (older files)
_REPEAT_COLUMNS = ["margin_mib", "over_mib", "spread_mib", "steady_peak_at_fit_mib"]


def capacity_reference(capacity: pd.DataFrame) -> pd.DataFrame:
    """Every search (a search run more than once: its runs oldest first), with the commit that
    measured it and whether it is the one its decision table shows (latest_searches: a search
    repeated in several runs is one row there): the model's predicted batch beside the
    verified one, the probes it took and the ones plain bisection would have, the linear fit
    of its probes (SEARCH_LINE_RULE), the answer's margin against its runs' noise. No speed
    from a busy host. (Each run's budget note is said once, by capacity_notes.)"""
    if capacity.empty:
        return pd.DataFrame(columns=CAPACITY_REFERENCE)
    order = ["machine", "workload", "preset", "budget_gib", "framework", "strategy"]
    capacity = capacity.reset_index(drop=True)  # rows are told apart by their index
    shown = set(latest_searches(capacity).index)
    capacity = capacity.assign(
        measured_by=capacity["run"].str.rsplit("-", n=1).str[-1],
        in_decision_table=["yes" if i in shown else "" for i in capacity.index],
    )
    table = _by_date(capacity).sort_values(order, kind="stable")
    busy = [_busy(r) is not None for r in table.itertuples()]
    # frames without the probes' peaks (older loaders) keep the recorded line
    unsound = [not _own_line(r) for r in table.itertuples()]
    table = table.reindex(columns=CAPACITY_REFERENCE).copy()
    table.loc[busy, "throughput_at_capacity"] = math.nan
    table.loc[unsound, _SEARCH_LINE] = math.nan
    for column in ("largest_batch", "predicted_batch", "bisection_probes", "smallest_non_fit"):
        table[column] = table[column].astype("Float64").round().astype("Int64")
    empty = [c for c in [*_REPEAT_COLUMNS, *_SEARCH_LINE, "foreign_cpu_share_at_fit"]
             if table[c].isna().all()]  # fmt: skip
    if table["repeats"].fillna(1).le(1).all():
        empty.append("repeats")
    return table.drop(columns=empty).round(2).reset_index(drop=True)


def capacity_notes(capacity: pd.DataFrame) -> list[str]:
    return sorted({n for n in capacity.get("note", pd.Series(dtype=str)) if n})


# The reader's formula keeps twice the residuals' standard error free: the line runs through
# the middle of the runs' peaks, and an answer must fit every run (without it, the formula gave
# more than the verified answer at 86 of 104 searches on amd-epyc-f25m17, and the batch it gave
# was put down by the boundary's noise or ran over). Twice the standard error, not the largest
# residual: that is one probe's (torch's ResNet-50 checkpoint: 403 MiB at 35 against an RMS of
# 109). The standard error counts the line's two parameters, sqrt(SSE / (n - 2)): a line through
# two probes says nothing of their noise, so it gives no formula.
HEADROOM_SE = 2
CURVE_FORMULA = "largest batch ~ floor((budget - fixed - headroom) / per-sample)"
CURVE_INTRO = (
    "Per workload x framework x strategy, a line fitted over every probe of its searches at "
    "every budget (peak = fixed + per-sample x batch, on the budget's layer; R² and the RMS "
    f"residual say how well it holds). For a budget of your own: {CURVE_FORMULA}, in MiB, "
    "then down to a batch the strategy accepts (accumulate-k: a multiple of k); the headroom "
    f"is {HEADROOM_SE} x the residuals' standard error (sqrt(SSE / (probes - 2)); none, and no "
    "formula, from two probes), since the line runs through the middle of the runs' peaks and "
    "a batch fits only when every run fits. Verified: the searches' answers (>= N: the "
    "search's maximum fitted); formula: what it gives at the same budgets. Its worst error is "
    "out of sample: each budget's verified answer against the formula from the other "
    "budgets' probes alone, |formula - verified| / verified, the worst over the budgets "
    "(where two or more were searched)."
)
# what a reader needs to read a capacity table: its rule, stated where the table shows
TABLE_NOTES = {CAPACITY_TITLE: SEARCH_LINE_RULE, CURVE_TITLE: CURVE_INTRO}


def table_note(name: str, table: pd.DataFrame) -> str:
    """The rule a reader needs beside the table titled `name` (TABLE_NOTES), empty where it has
    none or where the table shows nothing the rule speaks of (the capacity reference without
    any search's own line: capacity_reference drops those columns where every line is out)."""
    if name == CAPACITY_TITLE and not set(_SEARCH_LINE) & set(table.columns):
        return ""
    return TABLE_NOTES.get(name, "")


CURVE_COLUMNS = [
    *LINE_KEYS, "probes", "fixed_mib", "per_sample_mib", "fit_r2", "rms_residual_mib",
    "headroom_mib", "verified", "formula", "formula_error_pct",
]  # fmt: skip


def formula_batch(
    budget_bytes: float, fixed_bytes: float, per_sample_bytes: float, step: int = 1
) -> int | None:
    """The largest batch a fixed + per-sample cost puts within a budget, down to a multiple of
    the strategy's step (accumulate-k: k); CURVE_FORMULA with the headroom in the fixed cost."""
    if not per_sample_bytes > 0:
        return None
    return max(0, math.floor((budget_bytes - fixed_bytes) / per_sample_bytes)) // step * step


def _step(search: Any) -> int:
    """The batches a search's strategy accepts are multiples of this: the answer over the
    micro-batch its record reports (accumulate-k: k), else 1."""
    micro = (search.strategy_notes or {}).get("micro_batch")
    if isinstance(micro, int | float) and micro > 0 and search.largest_batch > 0:
        return max(1, round(search.largest_batch / micro))
    return 1


# a strategy's line: (fixed, per sample, R^2, RMS residual, probes), in bytes
Line = tuple[float, float, float, float, int]


def _line(peaks: pd.Series) -> Line | None:
    """(fixed, per sample, R^2, RMS residual, probes) of the line over every probe in peaks,
    or None with fewer than two distinct batches."""
    points = [point for probes in peaks for point in probes]
    if len({b for b, _ in points}) < 2:
        return None
    x, y = (np.asarray(v, dtype=float) for v in zip(*points, strict=True))
    fixed, per_sample, r2 = linear_fit(x, y)
    rms = float(np.sqrt(np.mean((y - fixed - per_sample * x) ** 2)))
    return fixed, per_sample, r2, rms, len(points)


def _headroom(line: Line) -> float:
    """CURVE_FORMULA's headroom (bytes): HEADROOM_SE x the residuals' standard error, NaN from
    two probes (a line through them has no residual to tell their noise by)."""
    _, _, _, rms, probes = line
    return HEADROOM_SE * rms * math.sqrt(probes / (probes - 2)) if probes > 2 else math.nan


def _reader_batch(
    budget_bytes: float, line: Line | None, step: int, headroom: bool = True
) -> int | None:
    """CURVE_FORMULA's batch from a _line (None without one, or where a cost is not finite);
    headroom=False: the bare line's."""
    if line is None:
        return None
    fixed = line[0] + (_headroom(line) if headroom else 0.0)
    if not (math.isfinite(fixed) and math.isfinite(line[1])):
        return None
    return formula_batch(budget_bytes, fixed, line[1], step)


def _formula_at_budgets(capacity: pd.DataFrame) -> pd.DataFrame:
    """One row per search that ended ok (its latest run), with its strategy's line over every
    budget's probes (`line`, None under two distinct batches): the verified answer, whether a
    non-fit bracketed it, and CURVE_FORMULA's batch from that line, without its headroom and
    from the other budgets' probes alone (out of sample; None with no other budget)."""
    columns = [*LINE_KEYS, "budget_gib", "line", "verified", "bracketed", "formula",
               "bare_line", "held_out"]  # fmt: skip
    if capacity.empty or "probe_peaks" not in capacity.columns:
        return pd.DataFrame(columns=columns)
    searches = latest_searches(capacity)
    searches = searches[searches["status"] == "ok"]
    rows = []
    for key, group in searches.groupby(LINE_KEYS, sort=True):
        whole = _line(group["probe_peaks"])
        for s in group.sort_values("budget_gib").itertuples():
            budget, step = s.budget_gib * 2**30, _step(s)
            others = _line(group.loc[group.index != s.Index, "probe_peaks"])
            rows.append({
                **dict(zip(LINE_KEYS, key, strict=True)), "budget_gib": s.budget_gib,
                "line": whole, "verified": int(s.largest_batch),
                "bracketed": bool(pd.notna(s.smallest_non_fit)),
                "formula": _reader_batch(budget, whole, step),
                "bare_line": _reader_batch(budget, whole, step, headroom=False),
                "held_out": _reader_batch(budget, others, step) if len(group) >= 2 else None,
            })  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def capacity_curve(capacity: pd.DataFrame) -> pd.DataFrame:
    """A reader's own budget: per machine, workload, preset, budget layer, framework and
    strategy, the fixed and per-sample cost fitted over the probes of its searches at every
    budget (R^2 and the RMS residual in MiB, the formula's headroom), the verified answers
    beside CURVE_FORMULA's, and the formula's worst error out of sample (each budget's answer
    against the formula from the other budgets' probes, |formula - verified| / verified, %)
    where two or more budgets were searched (an answer at the search's maximum, or 0, is left
    out of it)."""
    at_budgets = _formula_at_budgets(capacity)
    at_budgets = at_budgets[at_budgets["line"].notna()]
    rows = []
    for key, group in at_budgets.groupby(LINE_KEYS, sort=True):
        fixed, per_sample, r2, rms, probes = group["line"].iloc[0]
        verified, formula, errors = [], [], []
        for s in group.itertuples():
            label, answer = budget_label(s.budget_gib), s.verified
            verified.append(f"{label}: {answer if s.bracketed else f'>= {answer}'}")
            formula.append(f"{label}: {'-' if pd.isna(s.formula) else int(s.formula)}")
            if s.bracketed and answer > 0 and pd.notna(s.held_out):
                errors.append(abs(s.held_out - answer) / answer * 100)
        rows.append({
            **dict(zip(LINE_KEYS, key, strict=True)), "probes": probes,
            "fixed_mib": fixed / MIB, "per_sample_mib": per_sample / MIB, "fit_r2": r2,
            "rms_residual_mib": rms / MIB, "headroom_mib": _headroom(group["line"].iloc[0]) / MIB,
            "verified": "; ".join(verified), "formula": "; ".join(formula),
            "formula_error_pct": max(errors) if errors else math.nan,
        })  # fmt: skip
    return pd.DataFrame(rows, columns=CURVE_COLUMNS).round(2)


def formula_against_verified(capacity: pd.DataFrame) -> str:
    """How often CURVE_FORMULA, from every budget's probes (in sample), gives more than the
    verified answer at the budgets searched (a reader's batch that would not have held), with
    and without its headroom; empty where no answer is bracketed."""
    at_budgets = _formula_at_budgets(capacity)
    ok = at_budgets[at_budgets["bracketed"] & (at_budgets["verified"] > 0)]
    ok = ok.dropna(subset=["formula", "bare_line"])
    if ok.empty:
        return ""
    error = (ok["formula"] - ok["verified"]) / ok["verified"] * 100
    bare = int((ok["bare_line"] > ok["verified"]).sum())

    def counted(part: pd.Series) -> str:
        return f"{len(part)} (by at most {part.abs().max():.0f}%)" if len(part) else "none"

    return (
        f"In sample, the formula from every budget's probes gives more than the verified answer "
        f"at {counted(error[error > 0])} of the {len(ok)} searches with a formula and a "
        f"bounded answer above 0 (not the search's maximum), and fewer at "
        f"{counted(error[error < 0])}; the bare line, without the headroom, gives more at "
        f"{bare}."
    )


def _median_worst(values: pd.Series) -> dict[str, float]:
    return {"median": values.median(), "worst": values.max()}


def prediction_kind(basis: str) -> str:
    """What a search's first guess came from, from its stated basis: the framework's
    compiler (XLA), the memory model with this machine's calibration or another host kind's
    (and, where the strategy had no fit of its own, another strategy's constants), or the model
    from the specification alone (which also stands in where a compiled guess failed)."""
    for start, kind in (
        ("XLA", "XLA compiled"),
        ("calibrated on ", "model calibrated on another host kind"),
        ("calibrated", "calibrated model"),
    ):
        if basis.startswith(start):
            borrowed = basis.startswith("calibrated") and "'s constants" in basis
            return f"{kind}, another strategy's constants" if borrowed else kind
    return "spec-only model" if basis.startswith("spec-only") else "other"


def _scored(capacity: pd.DataFrame, batch: str, own_steps: bool) -> tuple[pd.DataFrame, pd.Series]:
    """The searches a guess (its column: the first guess's predicted_batch, or model_batch)
    is scored on (ended ok with a bracketed answer above 0 and a guess), and per row whether
    the guess's own input was measured at the answer or the next batch (own_steps: the first
    guess, whose XLA first-run extra ran steps and whose calibration cells, on this machine
    and of this strategy, measured its constants; a prediction is never scored against its
    own measurement)."""
    ok = capacity[(capacity["status"] == "ok") & (capacity["largest_batch"] > 0)]
    ok = ok.dropna(subset=[batch, "smallest_non_fit"])
    if not own_steps:
        return ok, pd.Series(False, index=ok.index, dtype=bool)
    fed = [
        bool({int(a), int(n)} & set(m))
        for a, n, m in zip(
            ok["largest_batch"], ok["smallest_non_fit"], ok["prediction_measured_batches"],
            strict=True,
        )
    ]  # fmt: skip
    return ok, pd.Series(fed, index=ok.index, dtype=bool)


# what a capacity error scores: the search's first guess (what guided it), or the memory
# model's with the calibrations of the latest `membench predict`
GUESSES = {
    "first": ("predicted_batch", "prediction_basis"),
    "model": ("model_batch", "model_basis"),
}


def capacity_error(capacity: pd.DataFrame, guess: str = "first") -> pd.DataFrame:
    """A guess's capacity error per framework, per what the guess came from
    (prediction_kind), the budget's layer and the preset (its input sizes: a one-sample answer
    at toy sizes makes a 100% error of a one-sample miss): |predicted - verified| / verified
    over the searches that ended ok with a bracketed answer (not the search's maximum) and a
    guess, in % (median and worst); a first guess whose own input was measured at the
    answer or the next batch is left out (counted; the model's guess is made again from
    today's calibrations, whose batches no committed search answers at: the calibrate
    preset's batches are chosen so, and test_calibration checks it).
    guess: "first" or "model" (GUESSES). "worst beyond noise %": the worst error against
    the answer's noise band (beyond_noise), which the verified answer's own runs set; "worst
    at": the search behind the worst error, for a reader to look up."""
    first = guess == "first"  # only the first guess ran steps of its own (XLA's)
    columns = ["framework", "prediction", "budget layer", "preset", "searches",
               "median error %", "worst error %", "worst at", "worst beyond noise %"]  # fmt: skip
    columns += ["left out (own input)"] if first else []
    if capacity.empty:
        return pd.DataFrame(columns=columns)
    batch, basis = GUESSES[guess]
    ok, fed = _scored(capacity, batch, own_steps=first)
    if ok.empty:
        return pd.DataFrame(columns=columns)
    error = (ok[batch] - ok["largest_batch"]).abs() / ok["largest_batch"] * 100
    band = beyond_noise(ok[batch], ok["largest_batch"], ok["fitted_every_run"])
    ok = ok.assign(error=error, band=band, fed=fed, kind=ok[basis].map(prediction_kind))
    rows = []
    groups = ok.groupby(["kind", "budget_layer", "preset"], sort=True)
    for (kind, layer, preset), by_kind in groups:
        parts = [*by_kind.groupby("framework", sort=True)]
        for framework, part in [*parts, *([("all", by_kind)] if len(parts) > 1 else [])]:
            scored = part[~part["fed"]]
            stats = _median_worst(scored["error"])
            left_out = [int(part["fed"].sum())] if first else []
            rows.append([framework, kind, metric_label(layer), preset, len(scored),
                         stats["median"], stats["worst"], _worst_at(scored, batch),
                         scored["band"].max(), *left_out])  # fmt: skip
    return pd.DataFrame(rows, columns=columns).round(1)


def _worst_at(scored: pd.DataFrame, batch: str) -> str:
    """The search with the largest error (the first in workload, framework, strategy, budget
    order where several tie): "transformer torch infer 2 GiB: 262 for 418"; "" where none was
    scored."""
    if scored.empty:
        return ""
    ordered = scored.sort_values(["workload", "framework", "strategy", "budget_gib"])
    row = ordered.iloc[int(ordered["error"].to_numpy().argmax())]
    what = f"{row['workload']} {row['framework']} {row['strategy']}"
    guessed, answer = int(row[batch]), int(row["largest_batch"])
    return f"{what} {budget_label(row['budget_gib'])}: {guessed} for {answer}"


def beyond_noise(guess: pd.Series, answer: pd.Series, top: pd.Series) -> pd.Series:
    """A guess's error against the answer's noise band, in %: 0 from the answer up to the
    largest batch that fitted every run (the batches the noise rule put down for want of
    room: a guess of the peak cannot know the runs' spread), else |guess - the band's
    nearest end| / that end."""
    top = top.fillna(answer).clip(lower=answer)
    over = (guess - top).clip(lower=0) / top
    under = (answer - guess).clip(lower=0) / answer
    return (over + under) * 100


def probes_per_search(capacity: pd.DataFrame) -> pd.DataFrame:
    """Probes the model-guided searches took against the ones plain doubling and bisection
    from batch 1 would have taken for the same answers (median and worst), the boundary's
    repeats counted on both sides (bisection would measure them too)."""
    columns = ["framework", "searches", "guided median", "guided worst", "bisection median",
               "bisection worst"]  # fmt: skip
    if capacity.empty:
        return pd.DataFrame(columns=columns)
    guided = capacity[capacity["search"] == "guided"]
    if guided.empty:
        return pd.DataFrame(columns=columns)
    guided = guided.assign(plain=guided["bisection_probes"] + guided["repeat_probes"])
    rows = []
    for framework, part in [*guided.groupby("framework", sort=True), ("all", guided)]:
        mine, plain = _median_worst(part["probes"]), _median_worst(part["plain"])
        rows.append([framework, len(part), mine["median"], mine["worst"], plain["median"],
                     plain["worst"]])  # fmt: skip
    return pd.DataFrame(rows, columns=columns).round(1)


NOISE_COLUMNS = ["run", "workloads", "rule", "answers", "margin >= spread", "within noise"]
NOISE_BY_RULE = ["preset", "rule", "runs", "workloads", "answers", "margin >= spread",
                 "within noise"]  # fmt: skip


def answers_against_noise(capacity: pd.DataFrame, by_rule: bool = False) -> pd.DataFrame:
    """Per capacity run whose boundaries were repeated: its answers (ok, above 0), how many
    leave at least the runs' spread below the budget and how many are within their noise,
    and the rule the run's searches followed (margin >= spread since noise_room, else every
    repeat within the budget). by_rule: the runs summed per preset and rule, the verdict a
    summary page has room for."""
    columns = NOISE_BY_RULE if by_rule else NOISE_COLUMNS
    if capacity.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    # an unsettled search holds no answer, and its rule is not known
    settled = capacity[capacity["status"] != UNSETTLED]
    repeated = settled[settled["repeats"].fillna(1) > 1]
    for (_, run), part in repeated.groupby(["machine", "run"], sort=True):
        ok = part[(part["status"] == "ok") & (part["largest_batch"] > 0)]
        known = ok.dropna(subset=["margin_mib", "spread_mib"])
        noisy = int((known["spread_mib"] > known["margin_mib"]).sum())
        rule = "margin >= spread" if part["noise_room"].eq(True).all() else "every repeat fits"
        preset = ", ".join(sorted(set(part["preset"])))
        rows.append([run, preset, set(part["workload"]), rule, len(ok), len(known) - noisy, noisy])
    per_run = pd.DataFrame(rows, columns=["run", "preset", *NOISE_COLUMNS[1:]])
    if by_rule:
        per_run = per_run.groupby(["preset", "rule"], sort=True).agg(**{
            "runs": ("run", "size"), "workloads": ("workloads", lambda w: set().union(*w)),
            **{c: (c, "sum") for c in ("answers", "margin >= spread", "within noise")},
        }).reset_index()  # fmt: skip
    per_run["workloads"] = per_run["workloads"].map(lambda w: ", ".join(sorted(w)))
    return per_run[columns]


# the strategies that fix glibc's mmap threshold, each with the strategy it is measured against
THRESHOLD_FIXED = {
    "mmap-threshold": REFERENCE[TRAINING],
    "infer-mmap-threshold": REFERENCE[INFERENCE],
}
THRESHOLD_COLUMNS = [
    "framework", "workload", "preset", "budget GiB", "reference", "reference's answer",
    "reference's spread MiB", "threshold fixed", "its answer", "its spread MiB",
]  # fmt: skip


def threshold_spread(capacity: pd.DataFrame) -> pd.DataFrame:
    """Per search of a strategy that fixes glibc's mmap threshold and its reference's at the
    same budget (both with an answer, their boundaries repeated): both answers and the runs'
    largest spread at each boundary, the noise an answer is measured against."""
    shown = latest_searches(capacity) if len(capacity) else capacity
    if shown.empty:
        return pd.DataFrame(columns=THRESHOLD_COLUMNS)
    answered = (shown["status"] == "ok") & (shown["largest_batch"] > 0)
    ok = shown[answered & (shown["repeats"].fillna(1) > 1)].dropna(subset=["spread_mib"])
    keys = ["machine", "framework", "workload", "preset", "budget_gib"]
    fixed = ok[ok["strategy"].isin(list(THRESHOLD_FIXED))]
    fixed = fixed.assign(reference=fixed["strategy"].map(THRESHOLD_FIXED))
    pairs = fixed.merge(
        ok, left_on=[*keys, "reference"], right_on=[*keys, "strategy"], suffixes=("", "_ref")
    )
    table = pd.DataFrame({
        "framework": pairs["framework"], "workload": pairs["workload"],
        "preset": pairs["preset"], "budget GiB": pairs["budget_gib"],
        "reference": pairs["reference"], "reference's answer": pairs["largest_batch_ref"],
        "reference's spread MiB": pairs["spread_mib_ref"], "threshold fixed": pairs["strategy"],
        "its answer": pairs["largest_batch"], "its spread MiB": pairs["spread_mib"],
    })  # fmt: skip
    table = table.sort_values(["framework", "workload", "preset", "budget GiB", "reference"])
    spreads = ["reference's spread MiB", "its spread MiB"]
    return table.reset_index(drop=True).round(dict.fromkeys(spreads, 1))


def capacity_searches(capacity: pd.DataFrame, digest: bool = False) -> dict[str, pd.DataFrame]:
    """The searches' own tables, titled: the first guess's error, the probes they took, the
    answers against their noise (per run, or, in a digest, per preset and rule), and (not in
    a digest) the boundaries' spread with glibc's mmap threshold fixed against its default."""
    named: dict[str, pd.DataFrame] = {}
    if len(error := capacity_error(capacity)):
        title = "The first guess's capacity error: |predicted - verified| / verified"
        named[f"{title}, by what the guess came from"] = error
    first = capacity_error(capacity)
    if len(error := capacity_error(capacity, "model")):
        title = "The memory model's capacity error with today's calibrations"
        same = first.drop(columns="left out (own input)").equals(error)
        if same:  # say so once, not in a second table a reader compares cell by cell
            spec = set(error["prediction"]) == {"spec-only model"}
            why = "no calibration on this machine: both are the spec-only model" if spec else (
                "the same guesses")  # fmt: skip
            for table in named.values():  # said above the one table (its attrs' note)
                table.attrs["note"] = (
                    f"The memory model's capacity error with today's calibrations is the same "
                    f"({why}): one table shows both."
                )
        else:
            named[f"{title} (never the search's own probes), by what its constants came from"] = (
                error)  # fmt: skip
    if len(probes := probes_per_search(capacity)):
        title = "Probes per search: model-guided against plain bisection"
        named[f"{title}, the repeats counted on both sides"] = probes
    if len(noise := answers_against_noise(capacity, by_rule=digest)):
        title = "The answers against their noise: margin against the boundary's spread"
        named[title + (", the runs summed per preset and rule" if digest else "")] = noise
    if not digest and len(spread := threshold_spread(capacity)):
        title = "glibc's mmap threshold and the boundary's noise: the runs' spread"
        named[f"{title} with its default against fixed, search for search"] = spread
    return named
