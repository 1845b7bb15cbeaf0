"""Why a decision row reads as it does, from the records: the best strategy and the ties within
the runs' noise (BEST_RULE), a margin told apart from its boundary's spread, and the notes of
an odd row (no more samples than its reference, far slower, a step in the peak, nothing fits).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.decision_terms import (
    JUMP,
    LARGEST,
    PART,
    RESERVE_METRICS,
    SAME_SPEED,
    SLOW,
    SPEED,
    SPEED_RUNS,
    TRAINING,
    boundary_spread,
    is_known,
    mib_text,
    own_line,
    published_speed,
    row_field,
    runs_by_batch,
    size_text,
)
from analysis.families import strategy_order
from analysis.schema import MIB


def _ties_with(row: pd.Series, top: pd.Series) -> bool:
    """Whether a row's samples/s (its runs' median) lies within the fastest row's runs, so
    that a run of the fastest was no faster, or within SAME_SPEED of it (BEST_RULE); one high
    run of its own does not make a row tie."""
    runs = top.get(SPEED_RUNS, ())
    slowest = min(runs) if isinstance(runs, tuple) and len(runs) >= 2 else top[SPEED]
    return bool(row[SPEED] >= min(slowest, top[SPEED] * (1 - SAME_SPEED)))


def best_marks(table: pd.DataFrame) -> pd.Series:
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


def _told_apart(a: float, b: float) -> tuple[str, str]:
    """Two MiB figures a reader compares, with the decimals that tell them apart where mib_text
    would write them alike (a 71.9 MiB margin clears a 71.5 MiB spread; "72" and "72" do not
    say which is larger)."""
    if mib_text(a) != mib_text(b) or a == b:
        return mib_text(a), mib_text(b)
    digits = next((d for d in range(1, 4) if f"{a:.{d}f}" != f"{b:.{d}f}"), 3)
    return f"{a:.{digits}f} MiB", f"{b:.{digits}f} MiB"


def margin_text(row: Any) -> str:
    """The answer against its noise, from the boundary's repeats: what is left below the
    budget, the next batch's excess, the runs' spread; "within noise" where the spread is
    larger than the margin. Empty for results without it (written before the repeats)."""
    margin = row_field(row, "margin_mib")
    if not is_known(margin) or not (row_field(row, "largest_batch", 0) or 0) > 0:
        return ""
    spread, over = row_field(row, "spread_mib"), row_field(row, "over_mib")
    noisy = is_known(spread) and spread > margin
    said, spread_said = _told_apart(margin, spread) if is_known(spread) else (mib_text(margin), "")
    text = ("within noise: " if noisy else "") + f"{said} to spare"
    nxt = row_field(row, "smallest_non_fit")
    if is_known(over) and is_known(nxt):
        text += f"; {int(nxt)} {_next_batch_said(row, over)}"
    if is_known(spread):
        text += f" (runs spread {spread_said})"
    return text


def _next_batch_said(row: Any, over: float) -> str:
    """Why the next batch is no answer: over the budget (on average, or in some of its
    runs), or, where every run fitted, put down by the noise rule (its room was less than
    the spread at its own boundary, which may be wider than the answer's)."""
    runs, above = row_field(row, "next_runs", 0) or 0, row_field(row, "next_runs_over", 0) or 0
    highest = row_field(row, "next_highest_over_mib")
    if not runs or not is_known(highest):  # a file older than these fields: the mean's sign
        return (
            f"over by {mib_text(over)}" if over >= 0 else f"under by {mib_text(-over)} on average"
        )
    runs, above = int(runs), int(above)
    if _next_put_down(row):  # its margin was under the spread at its own boundary
        said = f"fits all {runs} runs ({mib_text(-highest)} to spare"
        if (own := boundary_spread(row)) is not None:
            said += f", under the {mib_text(own[0])} spread at {own[1]} and {own[2]}"
        return said + "), put down by the noise rule"
    if above < runs:
        return f"over in {above} of {runs} runs, by up to {mib_text(highest)}"
    return f"over by {mib_text(over)}"


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
    mine = _dtype(row_field(row, "strategy_notes", {}))
    if mine is None:
        return ""
    theirs = _dtype(row_field(ref, "strategy_notes", {}))
    beside = f"; {ref.strategy} {theirs[1]}" if theirs and theirs[1] != mine[1] else ""
    return f"runs in {mine[1]} ({mine[0]}{beside})"


def _costs(row: Any, ref: Any) -> str:
    """The row's fixed and per-sample cost against its reference's: both strategies' lines over
    their probes at every budget where both have one (with_cost_lines), else the linear fits
    of their searches' own probes where those hold (own_line); else their peaks at their
    answers."""
    both = all(is_known(row_field(r, "line_per_sample_mib")) for r in (row, ref))
    fixed_col, per_col = ("line_fixed_mib", "line_per_sample_mib") if both else (
        "fit_fixed_mib", "fit_per_sample_mib")  # fmt: skip
    fixed, per = row_field(row, fixed_col), row_field(row, per_col)
    ref_fixed, ref_per = row_field(ref, fixed_col), row_field(ref, per_col)
    if not both and not (own_line(row) and own_line(ref)):
        fixed = per = math.nan  # a line through noise: the peaks at the answers instead
    name = ref.strategy
    if all(is_known(v) for v in (fixed, per, ref_fixed, ref_per)):
        over = (
            f" (lines over {int(row_field(row, 'line_budgets'))} budgets' probes)" if both else ""
        )
        text = (
            f"fixed {size_text(fixed)} vs {name} {size_text(ref_fixed)}; "
            f"{per:.1f} MiB/sample vs {ref_per:.1f}{over}"
        )
        if fixed > row.budget_gib * 1024:
            text += " (over the budget before any sample)"
        return text
    peak, ref_peak = row_field(row, "peak_at_fit_mib"), row_field(ref, "peak_at_fit_mib")
    if is_known(peak) and is_known(ref_peak):
        return (
            f"peak {size_text(peak)} at {int(row.largest_batch)} vs {name} {size_text(ref_peak)} "
            f"at {int(ref.largest_batch)}"
        )
    return "no cost of both to compare (no line their probes pin, no peak at an answer)"


def odd_notes(row: Any, ref: Any, factor: float, batch: int | None) -> list[str]:
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
        and is_known(row_field(row, "smallest_non_fit"))
    ):  # a strategy meant to save memory that saves none (not one that reached the maximum)
        out.append(f"fits no more than {name} ({theirs}): {_costs(row, ref)}")
    speed, ref_speed = published_speed(row), published_speed(ref)
    if is_known(speed) and is_known(ref_speed) and speed < SLOW * ref_speed:
        out.append(
            f"{ref_speed / speed:.1f}x slower than {name} "
            f"({speed:.3g} vs {ref_speed:.3g} samples/s at their answers)"
        )
    elif not is_known(speed) and is_known(factor) and factor < SLOW:
        out.append(f"{1 / factor:.1f}x slower than {name} at batch {batch}")
    if out:
        out.append(_runs_in(row, ref))
        micro = (row_field(row, "strategy_notes", {}) or {}).get("micro_batch")
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


def step_in_peak(row: Any, held: pd.DataFrame) -> str:
    """Where the next batch's peak lies JUMP times what its extra samples cost above the
    answer's (the means of their runs) beyond the runs' spread: by how much, and the
    framework's reserve at both where its search's records hold one. Empty otherwise, and
    where the boundary was measured once (no spread: a step cannot be told from noise)."""
    runs = runs_by_batch(row)
    nxt, mine = row_field(row, "smallest_non_fit"), int(row_field(row, "largest_batch", 0) or 0)
    per = next((v for v in (row_field(row, f"{fit}_per_sample_mib") for fit in ("line", "fit"))
                if is_known(v) and v > 0), None)  # fmt: skip
    spread = row_field(row, "spread_mib")
    if not is_known(nxt) or per is None or not is_known(spread) or not runs.get(mine):
        return ""
    nxt = int(nxt)
    if not runs.get(nxt):
        return ""
    jump, more = (np.mean(runs[nxt]) - np.mean(runs[mine])) / MIB, nxt - mine
    if jump - spread <= JUMP * per * more:
        return ""
    samples = "1 more sample costs" if more == 1 else f"{more} more samples cost"
    text = (
        f"{nxt} peaks {mib_text(jump)} above {mine}, {jump / (per * more):.1f}x what {samples} "
        f"({per:.1f} MiB/sample): a jump in the peak, not a sample's cost"
    )
    mine_held = held[
        (held["machine"] == row_field(row, "machine", ""))
        & (held["run"] == row_field(row, "run", "")) & (held["framework"] == row.framework)
        & (held["strategy"] == row.strategy)
    ]  # fmt: skip
    # the reserve on the budget's side: the host's for a host budget, else the device's
    host = "host" in str(row_field(row, "budget_layer", ""))
    for metric in (m for m in RESERVE_METRICS if ("_cpu_" in m) == host):
        at = mine_held[mine_held["metric"] == metric].set_index("batch_size")["reserve_mib"]
        if mine in at.index and nxt in at.index:
            return text + f"; {metric} {at[mine]:,.0f} MiB at {mine}, {at[nxt]:,.0f} at {nxt}"
    return text


def _next_put_down(row: Any) -> bool:
    """Whether the next batch fitted every one of its runs (the noise rule put it down)."""
    return (row_field(row, "next_runs", 0) or 0) > 0 and row_field(row, "next_runs_over", 0) == 0


def none_fits_note(row: Any) -> str:
    smallest = int(row.smallest_non_fit)
    if _next_put_down(row):
        return (
            f"none stands: batch {smallest}, the smallest, fits every run but with less room "
            "than the runs' spread"
        )
    return f"none fits: batch {smallest}, the smallest tried, is over the budget"
