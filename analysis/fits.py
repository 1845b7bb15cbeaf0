"""Peak memory against batch size: a fixed cost plus a per-sample cost, fitted per framework,
workload and strategy (least squares over the cells that ran), and the memory model's errors
as each record holds them (the worker's prediction, spec-only and with its machine's stored
calibration; `membench predict` rewrites them in stored records when the model changes).
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.schema import MIB, PRIMARY_MEMORY, device_kind
from membench.fitting import linear_fit
from membench.metrics import CALIBRATED_ERROR, SPEC_ONLY_ERROR

# one fitted series: a cell but its batch size
FIT_SERIES = ["machine", "device", "preset", "workload", "framework", "strategy"]


def memory_fits(view: pd.DataFrame) -> pd.DataFrame:
    """One row per framework x workload x strategy with >= 2 batch sizes that ran: the fit
    of the device kind's primary memory metric (MiB), its R^2 and the batches behind it."""
    rows = []
    ok = view[view["status"] == "ok"]
    for key, group in ok.groupby(FIT_SERIES, sort=True):
        cell = dict(zip(FIT_SERIES, key, strict=True))
        metric = PRIMARY_MEMORY[device_kind(cell["device"])]
        points = group[group["metric"] == metric].dropna(subset=["value"])
        points = points.groupby("batch_size")["value"].median()
        if len(points) < 2:
            continue
        batches = points.index.to_numpy(dtype=float)
        fixed, per_sample, r2 = linear_fit(batches, points.to_numpy(dtype=float))
        rows.append({
            **cell, "metric": metric, "fixed_mib": fixed / MIB,
            "per_sample_mib": per_sample / MIB, "r2": r2,
            "batches": ",".join(str(int(b)) for b in batches),
        })  # fmt: skip
    return pd.DataFrame(rows)


def cell_predictions(view: pd.DataFrame) -> pd.DataFrame:
    """Every ok cell of one rank whose record holds the memory model's prediction: its
    measured peak (the device kind's primary layer) and the errors of both predictions, as
    the worker (or `membench predict`) wrote them, by the mode the record stores (the loader's
    "mode"; a record that stores none is left out, never guessed). Calibration cells are never
    here (they live outside results/records)."""
    # a cell of W ranks is judged per rank, by its model state (sharded_model_state): one JAX
    # process holding W devices' replicas is not the one-device peak the model predicts
    ok = view[(view["status"] == "ok") & (view["world_size"] == 1)]
    wanted = [*PRIMARY_MEMORY.values(), SPEC_ONLY_ERROR, CALIBRATED_ERROR]
    ok = ok[ok["metric"].isin(wanted)]
    if ok.empty:
        return pd.DataFrame()
    keys = ["machine", "device", "framework", "framework_version", "workload", "strategy",
            "batch_size", "preset", "path", "mode"]  # fmt: skip
    wide = ok.pivot_table(index=keys, columns="metric", values="value", aggfunc="last")
    rows = []
    for key, row in wide.iterrows():
        cell = dict(zip(keys, key, strict=True))
        measured = row.get(PRIMARY_MEMORY[device_kind(cell["device"])], math.nan)
        spec_only = row.get(SPEC_ONLY_ERROR, math.nan)
        cell.pop("path")
        mode = cell.pop("mode")
        if not measured > 0 or math.isnan(spec_only) or not mode:
            continue
        rows.append({
            **cell, "mode": mode, "measured": measured, "error_spec_only": spec_only,
            "error_calibrated": row.get(CALIBRATED_ERROR, math.nan),
        })  # fmt: skip
    return pd.DataFrame(rows)


def _summary(errors: pd.Series, cells: pd.DataFrame, name: str) -> dict[str, object]:
    """Median and worst |error| of one kind, and the share under-predicted (a budget set
    from those predictions would run out of memory)."""
    errors = errors.dropna()
    if errors.empty:
        return {f"{name}_median_abs": math.nan, f"{name}_worst": math.nan,
                f"{name}_worst_cell": "", f"{name}_under": math.nan}  # fmt: skip
    worst = errors.abs().idxmax()
    return {
        f"{name}_median_abs": float(errors.abs().median()),
        f"{name}_worst": float(errors[worst]),
        f"{name}_worst_cell": f"{cells.loc[worst, 'strategy']} bs{cells.loc[worst, 'batch_size']}",
        f"{name}_under": float((errors < 0).mean()),
    }


def prediction_errors(view: pd.DataFrame) -> pd.DataFrame:
    """The memory model's table: per machine, device, framework, workload and mode, the
    median and worst |error| spec-only and calibrated, and the share of cells under-predicted
    (error < 0); `calibration` names the constants used (none: the calibrated columns are
    empty)."""
    cells = cell_predictions(view)
    if cells.empty:
        return pd.DataFrame()
    rows = []
    keys = ["machine", "device", "framework", "workload", "mode"]
    for key, group in cells.groupby(keys, sort=True):
        versions = sorted(group["framework_version"].unique())
        calibrated = group["error_calibrated"].notna().sum()
        rows.append({
            **dict(zip(keys, key, strict=True)), "cells": len(group),
            **_summary(group["error_spec_only"], group, "spec_only"),
            **_summary(group["error_calibrated"], group, "calibrated"),
            "calibration": f"{calibrated}/{len(group)} cells, {' '.join(versions)}",
        })  # fmt: skip
    return pd.DataFrame(rows)


# The sharded cells' model state: the busiest rank's measured bytes, the memory model's
# per-rank prediction, and the unsharded cell's (params + grads + optimizer state) / W.
SHARD_CELL = ["machine", "preset", "framework", "workload", "batch_size"]


def sharded_model_state(view: pd.DataFrame) -> pd.DataFrame:
    """One row per ok cell of W > 1 ranks that measured its model state: measured and
    predicted MiB per rank, the model's error, and the share of the unsharded model state
    (the same preset's one-rank baseline) the busiest rank holds, beside 1/W."""
    measured = "model_state_bytes_max_over_ranks"
    used = [measured, "analytic_floor_bytes", "predicted_model_state_bytes",
            "model_state_prediction_error"]  # fmt: skip
    ok = view[(view["status"] == "ok") & view["value"].notna() & view["metric"].isin(used)]
    wide = ok.pivot_table(
        index=[*SHARD_CELL, "strategy", "world_size"], columns="metric", values="value",
        aggfunc="last",
    )  # fmt: skip
    if measured not in wide.columns:
        return pd.DataFrame()
    whole = {
        key[: len(SHARD_CELL)]: row.get("analytic_floor_bytes", math.nan)
        for key, row in wide.iterrows()
        if key[-2] == "baseline" and key[-1] == 1
    }
    rows = []
    for key, row in wide[wide[measured].notna()].iterrows():
        cell = dict(zip([*SHARD_CELL, "strategy", "world_size"], key, strict=True))
        if cell["world_size"] < 2:
            continue
        unsharded = whole.get(key[: len(SHARD_CELL)], math.nan)
        rows.append({
            **cell, "measured_mib": row[measured] / MIB,
            "predicted_mib": row.get("predicted_model_state_bytes", math.nan) / MIB,
            "prediction_error": row.get("model_state_prediction_error", math.nan),
            "unsharded_mib": unsharded / MIB,
            "share_of_unsharded": row[measured] / unsharded, "one_over_w": 1 / cell["world_size"],
        })  # fmt: skip
    return pd.DataFrame(rows)
