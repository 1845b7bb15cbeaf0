"""Peak memory against batch size: a fixed cost plus a per-sample cost, fitted per framework,
workload and strategy (least squares over the cells that ran), and the memory model's error.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.schema import PRIMARY_MEMORY, device_kind
from membench.fitting import linear_fit

GROUP = ["machine", "device", "preset", "workload", "framework", "strategy"]
MIB = 2**20


def memory_fits(view: pd.DataFrame) -> pd.DataFrame:
    """One row per framework x workload x strategy with >= 2 batch sizes that ran: the fit
    of the device kind's primary memory metric (MiB), its R^2 and the batches behind it."""
    rows = []
    ok = view[view["status"] == "ok"]
    for key, group in ok.groupby(GROUP, sort=True):
        cell = dict(zip(GROUP, key, strict=True))
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


def prediction_errors(view: pd.DataFrame) -> pd.DataFrame:
    """Median absolute error of the memory model per framework and workload, training and
    inference cells apart, with the worst cell."""
    errors = view[(view["metric"] == "memory_prediction_error") & (view["status"] == "ok")]
    errors = errors.dropna(subset=["value"]).copy()
    if errors.empty:
        return pd.DataFrame()
    errors["mode"] = np.where(errors["strategy"].str.startswith("infer"), "infer", "train")
    rows = []
    keys = ["machine", "device", "workload", "framework", "mode"]
    for key, group in errors.groupby(keys, sort=True):
        worst = group.loc[group["value"].abs().idxmax()]
        rows.append({
            **dict(zip(keys, key, strict=True)), "cells": len(group),
            "median_abs_error": float(group["value"].abs().median()),
            "worst_cell": f"{worst['strategy']} bs{worst['batch_size']}",
            "worst_error": float(worst["value"]),
        })  # fmt: skip
    return pd.DataFrame(rows)
