"""What a GPU chooses as it runs, which neither a trace nor a compile without the device can
see: cuDNN's convolution algorithms, timed on the device (torch's cudnn.benchmark, XLA's
autotuner), and the workspaces they take. The GPU records show it as a gap between the
measured peak and the prediction that grows with the batch and the element's width, whatever
else the strategy changes: on the H200 the U-Net's allocated gap is about 1,000 MiB a sample
in float32 and 495 MiB in bfloat16, with or without checkpointing.

So each prediction held to a record gets the gap its *other* records show: per framework,
workload, device kind and compute width, the median over those records' gaps per sample and
per byte of element, times the record's batch and width. The records of the prediction's own
cell are left out, so that no measurement feeds its own prediction. A reserve so corrected
stays within the allocator limit its record ran under (the caching allocator frees its cache
and retries before it passes the limit). JAX's records within a budget neither give nor get
a correction: XLA fits its autotuning to the limit (analysis.gpu_predictions counts them
apart).

The compute width goes by the strategy's name, as analysis reads strategies (it does not
import the registry): mixed or half precision (amp-*, *-bf16*, *-fp16*, *half*) computes
in two bytes, every other strategy in four.
"""

from __future__ import annotations

import re

import pandas as pd

HALF_WIDTH = r"amp-.*|.*-bf16.*|.*-fp16.*|.*half.*"
CORRECTED = ("allocated", "reserved")  # the layers a workspace adds to (process: via reserved)
GROUP = ["framework", "workload", "device_kind", "width"]
CELL = ["framework", "workload", "strategy", "batch_size"]


def width(strategy: str) -> int:
    """Bytes per element the strategy computes in."""
    return 2 if re.fullmatch(HALF_WIDTH, strategy) else 4


def learned(v: pd.DataFrame, adapts_to_limit: tuple[str, ...]) -> pd.DataFrame:
    """Per record of the validation v (its measured_* and predicted *_bytes columns), the
    run-time workspace learned from the other cells of its group, per layer: workspace_<layer>
    (bytes; NaN where the group has no other cell), and workspace_from: how many records."""
    v = v.assign(width=v["strategy"].map(width))
    usable = ~(v["framework"].isin(adapts_to_limit) & (v["limit"] >= 0))
    per_sample = {
        layer: (v[f"measured_{layer}"] - v[f"{layer}_bytes"]) / (v["batch_size"] * v["width"])
        for layer in CORRECTED
    }
    out = {f"workspace_{layer}": [] for layer in CORRECTED} | {"workspace_from": []}
    for i, row in v.iterrows():
        others = usable & (v[GROUP] == row[GROUP]).all(axis=1) & ~(v[CELL] == row[CELL]).all(axis=1)
        if not usable[i]:
            others &= False
        out["workspace_from"].append(int(others.sum()))
        for layer in CORRECTED:
            gaps = per_sample[layer][others].dropna()
            scale = row["batch_size"] * row["width"]
            out[f"workspace_{layer}"].append(gaps.median() * scale if len(gaps) else float("nan"))
    return pd.DataFrame(out, index=v.index)


def corrected(v: pd.DataFrame, adapts_to_limit: tuple[str, ...]) -> pd.DataFrame:
    """v with <layer>_bytes_traced (the prediction as made) and <layer>_bytes the prediction
    with its learned workspace added (unchanged where none was learned), the reserve within
    its record's limit."""
    ws = learned(v, adapts_to_limit)
    v = pd.concat([v, ws], axis=1)
    for layer in CORRECTED:
        made = v[f"{layer}_bytes"].astype(float)
        added = made + v[f"workspace_{layer}"].fillna(0.0)
        if layer == "reserved":
            limited = v["limit"] >= 0
            added = added.where(~limited, added.clip(upper=v["limit"].astype(float)))
        v[f"{layer}_bytes_traced"] = made
        v[f"{layer}_bytes"] = added.where(made.notna())
    return v
