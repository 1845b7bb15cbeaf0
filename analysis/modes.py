"""Training or inference: the mode a strategy ran in, as its records store it.

The worker writes the strategy's mode (the registry's Strategy.mode: "train" or "infer") into
the record of every cell it measures to the end (environment["strategy_notes"]["mode"], and
environment["prediction"]["mode"] beside the memory model's errors); the loader reads it into
the "mode" column of the tidy frame and of the capacity frame (analysis.loader.recorded_mode).
Analysis goes by that column wherever it tells training from inference (the decision table's
sections and references, the training Pareto front).

A row without one: a cell that did not end ok (unsupported, a timeout, out of memory, an
error: the mode is written with the measured figures), a record written before the worker
noted the mode, an asv row, a capacity search none of whose answer's records says. Such a
row goes by its strategy's name, under the registry's naming (analysis.families: the
inference family, infer* and two-models-*, ran in infer mode; every other name trains).
Across the committed results the two agree: every strategy whose records say has the mode
its name gives.
"""

from __future__ import annotations

import pandas as pd

from analysis.families import INFERENCE, family

TRAIN, INFER = "train", "infer"  # the record's modes (membench.registry.knobs.Mode)


def mode_by_name(strategy: str) -> str:
    """The mode a strategy's name gives it: only for a row whose record stores none."""
    return INFER if family(strategy) == INFERENCE else TRAIN


def mode_of(recorded: object, strategy: str) -> str:
    """A row's mode: the one its record stores, else its name's (mode_by_name)."""
    return recorded if isinstance(recorded, str) and recorded else mode_by_name(strategy)


def modes(rows: pd.DataFrame) -> pd.Series:
    """Each row's mode (mode_of), from its "mode" column (absent: every row by its name) and
    its "strategy"."""
    recorded = rows["mode"] if "mode" in rows.columns else pd.Series("", index=rows.index)
    found = [mode_of(m, s) for m, s in zip(recorded, rows["strategy"], strict=True)]
    return pd.Series(found, index=rows.index, dtype=object)


def trains(rows: pd.DataFrame) -> pd.Series:
    """True on each row that trains (a step with a backward pass)."""
    return modes(rows) == TRAIN
