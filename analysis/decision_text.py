"""The decision tables as a reader sees them: cells written out (memory and speed against the
reference, samples/s with its runs, reasons shortened), the tables by mode, and the notes that
say how to read their columns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from analysis.decision_terms import (
    BEST,
    BEST_RULE,
    INFERENCE,
    LARGEST,
    MARGIN,
    MEMORY_LAYER,
    MEMORY_VS,
    NOTE,
    PART,
    SAME_SPEED,
    SPEED,
    SPEED_RUNS,
    SPEED_VS,
    TRAINING,
)

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
