"""What a GPU chooses as it runs, which neither a trace nor a compile without the device can
see: cuDNN's convolution algorithms, timed on the device (torch's cudnn.benchmark, XLA's
autotuner), and the workspaces they take. The GPU records show it as a gap between the
measured peak and the prediction that grows with the (micro-)batch and the element's width,
whatever else the strategy changes: on the H200 the U-Net's allocated gap is about 1,000 MiB a
sample in float32 and 495 MiB in bfloat16, with or without checkpointing.

So each prediction held to a record gets the gap its *other* records show: per framework,
workload, device kind and compute width, the median over those records' gaps per sample of
the micro-batch (an accumulating step's convolutions see batch / k) and per byte of element,
times the record's micro-batch and width; never below nothing (a workspace adds). The records
of the prediction's own cell are left out, so that no measurement feeds its own prediction.
Records measured within a budget neither give nor get a correction: under an allocator limit
the device fits its choices to the memory left (cuDNN skips algorithms whose workspace it
cannot allocate, XLA fits its autotuning to the limit), which is also why a card's capacity is
predicted as traced.

The compute width and the accumulation go by the strategy's name, as analysis reads
strategies (it does not import the registry): mixed or half precision (amp-*, *-bf16*,
*-fp16*, *half*) computes in two bytes, every other strategy in four; accumulate-k splits the
batch in k.
"""

from __future__ import annotations

import re

import pandas as pd

HALF_WIDTH = r"amp-.*|.*-bf16.*|.*-fp16.*|.*half.*"
ACCUMULATE = re.compile(r"accumulate-(\d+)")
CORRECTED = ("allocated", "reserved")  # the layers a workspace adds to (process: via reserved)
GROUP = ["framework", "workload", "device_kind", "width"]
CELL = ["framework", "workload", "strategy", "batch_size"]


def width(strategy: str) -> int:
    """Bytes per element the strategy computes in."""
    return 2 if re.fullmatch(HALF_WIDTH, strategy) else 4


def micro_batch(strategy: str, batch: int) -> float:
    """The batch one forward and backward of the strategy's step sees."""
    found = ACCUMULATE.fullmatch(strategy)
    return batch / int(found[1]) if found else float(batch)


def learned(v: pd.DataFrame) -> pd.DataFrame:
    """Per record of the validation v (its measured_* and predicted <layer>_bytes columns),
    the run-time workspace learned from the other cells of its group, per layer:
    workspace_<layer> (bytes; NaN where it gets none), and workspace_from: how many records."""
    unit = [micro_batch(s, b) * width(s) for s, b in zip(v["strategy"], v["batch_size"],
                                                         strict=True)]  # fmt: skip
    v = v.assign(width=v["strategy"].map(width), unit=unit)
    teaching = v["limit"] < 0  # within a budget the device fits its choices to the limit
    per_unit = {layer: (v[f"measured_{layer}"] - v[f"{layer}_bytes"]) / v["unit"]
                for layer in CORRECTED}  # fmt: skip
    out = {f"workspace_{layer}": [] for layer in CORRECTED} | {"workspace_from": []}
    for i, row in v.iterrows():
        others = (
            teaching & (v[GROUP] == row[GROUP]).all(axis=1) & ~(v[CELL] == row[CELL]).all(axis=1)
        ) & bool(teaching[i])
        out["workspace_from"].append(int(others.sum()))
        for layer in CORRECTED:
            gaps = per_unit[layer][others].dropna()
            found = max(0.0, gaps.median()) * row["unit"] if len(gaps) else float("nan")
            out[f"workspace_{layer}"].append(found)
    return pd.DataFrame(out, index=v.index)


def corrected(v: pd.DataFrame) -> pd.DataFrame:
    """v with <layer>_bytes_traced (the prediction as made) and <layer>_bytes the prediction
    with its learned workspace added (unchanged where it gets none)."""
    v = pd.concat([v, learned(v)], axis=1)
    for layer in CORRECTED:
        made = v[f"{layer}_bytes"].astype(float)
        v[f"{layer}_bytes_traced"] = made
        v[f"{layer}_bytes"] = made + v[f"workspace_{layer}"].fillna(0.0)
    return v
