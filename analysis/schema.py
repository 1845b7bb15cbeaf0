"""The tidy results table: one row per (source, cell, metric). Framework-free.

Every loader output has exactly COLUMNS. A cell that did not end `ok` still has its rows
(one per core metric), with value NaN and its status and reason, so tables show statuses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from membench.metrics import CORE_METRICS as CATALOGUE_CORE
from membench.metrics import METRICS as CATALOGUE
from membench.metrics import MIB  # noqa: F401  (the analysis modules' unit, from here)

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = [
    "source",  # "record" (the runner's Record) or "asv" (an asv result file)
    "machine",  # results/<machine> name: the host kind, e.g. amd-epyc-f26m2-avx512bf16-2core-24gib
    "device",  # "cpu" or the GPU's name, e.g. "NVIDIA H100 80GB HBM3"
    # the host's CPU model: a machine named from records without the CPU's family, model and
    # ISA flags (amd-epyc-2core-24gib) is a label that can stand for hosts whose speeds do not
    # compare ("" where the source does not say)
    "host_cpu",
    "framework",  # torch, jax, jittor
    "framework_version",
    "environment",  # "default" (the installed env) or a version env's label, e.g. jax-0.10.2
    "python",  # the interpreter the cell ran on, e.g. "3.12" ("" where the source does not say)
    "workload",
    "strategy",
    # the strategy's mode as the record stores it, "train" or "infer"; "" where the source does
    # not say (analysis.modes: such a row goes by its strategy's name)
    "mode",
    "batch_size",  # int, the global batch
    "world_size",  # int, ranks (devices) the cell ran on: 1 unless a sharding strategy's
    "preset",  # smoke, cpu, gpu ("" where the source does not say)
    # the workload's inputs in words (analysis.labels.inputs_label of the record's
    # workload_inputs), e.g. "224x224 images, 1000 classes"; "" where the record does not say
    "inputs",
    "commit",  # git commit of the suite that measured it
    "started_at",  # ISO timestamp of the measurement
    "status",  # ok, oom, unsupported, timeout, error (asv rows: ok or n/a)
    "reason",
    "metric",  # a key of METRICS
    "layer",  # a key of membench.metrics.LAYERS
    "value",  # float; NaN where not measured
    "unit",  # bytes, samples/s, s, count
    "spread_low",  # 25th percentile of the samples behind value (step times), else NaN
    "spread_high",  # 75th percentile
    "n_samples",  # number of samples behind value (step times), else 1
    "path",  # the file the row came from
]


# The catalogue of metrics lives in the harness's base layer (membench.metrics); every name a
# row's "metric" column holds is a key of METRICS.
METRICS = CATALOGUE
CORE_METRICS = CATALOGUE_CORE

DEFAULT_ENVIRONMENT = "default"

# Column sets, each named by what it identifies (one meaning across analysis/):
# one report section (its tables and plots)
WORKLOAD_DEVICE_PRESET = ["workload", "device", "preset"]
# one cell within a section
FRAMEWORK_STRATEGY_BATCH = ["framework", "strategy", "batch_size"]
# one metric of one cell, across machines and presets (what latest() keeps the newest of)
CELL_METRIC = [
    "machine", "preset", "workload", "framework", "strategy", "batch_size", "world_size", "metric",
]  # fmt: skip

# The memory metric that tells most, per device kind: the allocator on GPUs, the host on CPUs.
PRIMARY_MEMORY = {"cpu": "peak_host_rss_bytes", "gpu": "peak_device_allocated_bytes"}


def device_kind(device: str) -> str:
    return "cpu" if device == "cpu" else "gpu"


def one_machine(frame: pd.DataFrame) -> str | None:
    """The rows' machine (None where they name none); rows of several machines are refused: a
    figure or table pooled over host kinds puts one machine's figure beside another's, unnamed
    (a caller splits by machine first)."""
    machines = sorted(frame["machine"].dropna().unique()) if "machine" in frame else []
    if len(machines) > 1:
        raise ValueError(f"rows of {len(machines)} machines ({', '.join(machines)}): one at a time")
    return machines[0] if machines else None
