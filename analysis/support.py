"""Which strategies each framework refuses, shown once: a support matrix (strategy x
framework) over the latest records, and the refusals' reasons, each said once."""

from __future__ import annotations

import pandas as pd

from analysis.families import family, strategy_order

REFUSED = "unsupported"


def _verdict(cells: pd.DataFrame) -> str:
    """ "runs", "refused" or "partly" (some cells refused: a batch that does not split into
    micro-batches, a preset without ranks) where every workload agrees; else each class with
    its workloads."""
    classes: dict[str, list[str]] = {"runs": [], "partly": [], "refused": []}
    for workload, rows in cells.groupby("workload", sort=True):
        refused = rows["status"] == REFUSED
        kind = "refused" if refused.all() else "partly" if refused.any() else "runs"
        classes[kind].append(str(workload))
    present = {k: v for k, v in classes.items() if v}
    if len(present) == 1:
        return next(iter(present))
    return "; ".join(f"{k} on {', '.join(v)}" for k, v in present.items())


def support_matrix(view: pd.DataFrame) -> pd.DataFrame:
    """strategy rows (with their family), framework columns (_verdict), over every preset's
    cells."""
    cells = view.drop_duplicates(
        ["machine", "preset", "workload", "framework", "strategy", "batch_size", "world_size"]
    )
    if cells.empty:
        return pd.DataFrame()
    verdicts = cells.groupby(["strategy", "framework"]).apply(_verdict, include_groups=False)
    matrix = verdicts.unstack("framework").fillna("not measured")
    matrix = matrix.reindex(strategy_order(matrix.index))
    matrix.insert(0, "family", [family(s) for s in matrix.index])
    matrix.columns.name = None
    return matrix.reset_index()


def refusals(view: pd.DataFrame) -> pd.DataFrame:
    """Each distinct refusal once: framework, strategy, the workloads it was given for, and
    the reason."""
    cells = view[view["status"] == REFUSED].drop_duplicates(
        ["machine", "preset", "workload", "framework", "strategy", "batch_size", "world_size"]
    )
    if cells.empty:
        return pd.DataFrame(columns=["framework", "strategy", "workloads", "reason"])
    rows = (
        cells.groupby(["framework", "strategy", "reason"])["workload"]
        .agg(lambda w: ", ".join(sorted(set(w))))
        .rename("workloads")
        .reset_index()
    )
    order = {s: i for i, s in enumerate(strategy_order(rows["strategy"]))}
    rows = rows.assign(_o=rows["strategy"].map(order))
    rows = rows.sort_values(["framework", "_o", "reason"], kind="stable").drop(columns="_o")
    return rows[["framework", "strategy", "workloads", "reason"]].reset_index(drop=True)
