"""The decision tables' terms: their key, parts, column names and thresholds, and how a capacity
search's row is read (its fields, its busy share, its own line, its runs at the boundary, the
latest search per question). Every other decision module builds on these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from analysis.modes import INFER
from analysis.schema import MIB
from membench.fitting import linear_fit
from membench.metrics import ANY_RESERVE, BUSY_METRIC, busy_share
from membench.records import UNSETTLED

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


def part_of(row_mode: str) -> str:
    """The table's part for a row of this mode (analysis.modes)."""
    return INFERENCE if row_mode == INFER else TRAINING


def row_field(row: Any, name: str, default: Any = math.nan) -> Any:
    """A capacity row's field; frames older than the loader's details lack some."""
    value = getattr(row, name, default)
    return default if value is None else value


def is_known(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def size_text(mib: float) -> str:
    """850 MiB; 1.21 GiB from 1 GiB up."""
    return f"{mib / 1024:.2f} GiB" if abs(mib) >= 1024 else f"{mib:.0f} MiB"


def mib_text(mib: float) -> str:
    """A margin's MiB: one decimal below 10 (a boundary is often decided by a few MiB), two
    significant figures below 0.1 (a batch over by 28 KiB is not over by 0.0)."""
    if 0 < abs(mib) < 0.1:
        return f"{mib:.2g} MiB"
    return f"{mib:.1f} MiB" if abs(mib) < 10 else f"{mib:.0f} MiB"


def busy_of(row: Any) -> float | None:
    """The foreign CPU share behind a search's answer where it is over the busy threshold
    (its speed is then the other processes' as much as its own), else None (also unknown)."""
    share = row_field(row, "foreign_cpu_share_at_fit")
    return busy_share({BUSY_METRIC: float(share)}) if is_known(share) else None


def busy_note(share: float) -> str:
    return f"host busy: {share:.0%} foreign CPU"


def at_maximum(batch: int) -> str:
    """An answer at the search's largest batch is a lower bound: nothing larger was tried."""
    return f"search's maximum reached (>= {batch})"


def published_speed(row: Any) -> float:
    speed = row_field(row, "throughput_at_capacity")
    ok = row.status == "ok" and is_known(speed) and (row.largest_batch or 0) > 0
    return float(speed) if ok and busy_of(row) is None else math.nan


CAPACITY_TITLE = "Capacity: largest batch within the budget"
CURVE_TITLE = "Capacity at your own budget: fixed and per-sample cost from the probes"
SEARCH_LINE = ["fit_fixed_mib", "fit_per_sample_mib", "fit_r2"]
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


def own_line(row: Any) -> bool:
    """Whether a search's own fitted line (fit_*) may be quoted: its probes do not show it
    undetermined (_line_holds), or the frame is older than the probes' peaks."""
    points = row_field(row, "probe_peaks", None)
    return points is None or _line_holds(points)


def runs_by_batch(row: Any) -> dict[int, list[float]]:
    """The peaks of each batch's runs in the search's probes, in bytes."""
    runs: dict[int, list[float]] = {}
    for batch, peak in row_field(row, "probe_peaks", ()) or ():
        runs.setdefault(int(batch), []).append(peak)
    return runs


def boundary_spread(row: Any) -> tuple[float, int, int] | None:
    """The spread that put the next batch down, with the two batches: the larger max - min of
    its runs and of the runs of the batch above it measured again (None where the probes do
    not show it)."""
    runs = runs_by_batch(row)
    nxt = int(row_field(row, "smallest_non_fit"))
    above = min((b for b, v in runs.items() if b > nxt and len(v) > 1), default=None)
    if len(runs.get(nxt, ())) < 2 or above is None:
        return None
    return max(max(v) - min(v) for v in (runs[nxt], runs[above])) / MIB, nxt, above


def latest_searches(capacity: pd.DataFrame) -> pd.DataFrame:
    """The same search in several runs: the latest run's (by_date), except that a settled
    search wins over an unsettled one at any date. Every table and sentence picks by it."""
    keys = ["machine", "workload", "preset", "budget_gib", "framework", "strategy"]
    settled = capacity["status"] != UNSETTLED
    ranked = by_date(capacity.assign(_settled=settled), first=["_settled"])
    return ranked.drop_duplicates(keys, keep="last").drop(columns="_settled")


def by_date(capacity: pd.DataFrame, first: list[str] | None = None) -> pd.DataFrame:
    """The searches, oldest run first by analysis.loader's run_at (the folder's name, which
    ends in a commit's hash, only breaks a tie); `first`: columns that order before it."""
    return capacity.sort_values([*(first or []), "run_at", "run"], kind="stable")


# A strategy's line over its searches' probes at every budget of a preset (capacity_curve's):
# what a row's note compares, since one search's probes span a few batches around its answer,
# whose noise tilts its own line (JAX's U-Net baseline within 1.25 GiB: 246 MiB fixed and 45.8
# a sample over its probes, 859 and 17.9 over both budgets').
LINE_KEYS = ["machine", "workload", "preset", "budget_layer", "framework", "strategy"]
