"""Claims judged on predictions, at the claims' own sizes where no GPU run reaches them: each
claim's evaluation run on one card's and preset's predicted figures (membench gpu-predict),
by the same rule and bands as a measured verdict, and kept a class of its own ("predicted:
..."), never combined with a measured verdict. A prediction has no speed: a claim's speed
statement stays unjudged, and what cannot be predicted (torch.compile, sharding) is said."""

from __future__ import annotations

import pandas as pd

from analysis.claims.findings import ACTIVATION, NOT_MEASURABLE, TABLE_COLUMNS, Source
from analysis.claims.verdicts import CLAIMS, evaluate
from membench.metrics import ANALYTIC_FLOOR_BYTES, PEAK_DEVICE_ALLOCATED_BYTES

PREDICTED_CLAIMS = ("C4", "C5")  # about sizes beyond the GPU runs (docs/claims.md)
PREDICTED = "predicted"
# a prediction's figure -> the metric a GPU record names it by
METRICS = {
    "allocated_bytes": PEAK_DEVICE_ALLOCATED_BYTES, ANALYTIC_FLOOR_BYTES: ANALYTIC_FLOOR_BYTES,
}  # fmt: skip
KEYS = ["framework", "workload", "strategy", "batch_size"]


def predicted_sources(predicted: pd.DataFrame) -> list[Source]:
    """One Source per card and preset of the stored predictions (analysis.gpu_predictions.
    load_predictions), one row per prediction and figure, as records' rows are; predictions
    under an allocator limit (capacity probes) left out."""
    if predicted.empty:
        return []
    p = predicted[predicted["limit"] < 0].drop_duplicates(subset=["card", "preset", *KEYS])
    out = []
    for (card, preset), rows in p.groupby(["card", "preset"], sort=True):
        long = rows.melt(
            id_vars=[*KEYS, "status"], value_vars=list(METRICS), var_name="figure"
        ).assign(metric=lambda f: f["figure"].map(METRICS), world_size=1)
        out.append(Source(f"{card} ({PREDICTED})", str(preset), "cuda", long))
    return out


def predicted_claims(predicted: pd.DataFrame) -> pd.DataFrame:
    """PREDICTED_CLAIMS judged on each card's and preset's predictions that answer them: one
    row each, its verdict marked predicted; beside it the predicted figures of the claim's
    torch cells (the allocated peak, and activation memory where the prediction counted the
    model state) and the cells its predictor refused, with why."""
    rows = []
    for claim in (c for c in CLAIMS if c.id in PREDICTED_CLAIMS):
        workloads = {n for need in claim.needs if need.column == "workload" for n in need.names}
        for src in predicted_sources(predicted):
            if not (findings := claim.evaluate(src)):
                continue
            compared = {"baseline"} | {k.strategy for f in findings for k in f.values}
            row = evaluate(claim, src.rows, [src])
            # "not measurable here" speaks of measurements: a prediction is just not judged
            verdict = "not judged" if row["verdict"] == NOT_MEASURABLE else row["verdict"]
            row["verdict"] = f"{PREDICTED}: {verdict}"
            row["device"] = src.label
            row["figures"] = _figures(src, workloads, compared)
            refused = predicted[
                (predicted["card"] + f" ({PREDICTED})" == src.machine)
                & (predicted["preset"] == src.preset) & (predicted["status"] == "unsupported")
                & predicted["workload"].isin(workloads) & (predicted["framework"] == "torch")
            ].drop_duplicates(subset=KEYS)  # fmt: skip
            row["not predicted"] = "; ".join(
                f"{r.strategy}: {r.reason}" for r in refused.itertuples()
            )
            rows.append(row)
    return pd.DataFrame(rows, columns=[*TABLE_COLUMNS, "figures", "not predicted"])


def _figures(src: Source, workloads: set[str], strategies: set[str]) -> str:
    activation = src.values(ACTIVATION)
    allocated = src.values(PEAK_DEVICE_ALLOCATED_BYTES)
    said = []
    for key in sorted(allocated, key=lambda k: (k.workload, k.batch_size, k.strategy)):
        if key.framework != "torch" or key.workload not in workloads:
            continue
        if key.strategy not in strategies:
            continue
        held = f" (activation {activation[key] / 2**30:,.1f})" if key in activation else ""
        said.append(
            f"{key.strategy} bs {key.batch_size}: allocated {allocated[key] / 2**30:,.1f} GiB"
            + held
        )
    return "; ".join(said)
