"""What a GPU process holds beside its framework's allocator, as the GPU records measured it:
the CUDA context, the libraries' handles and the kernels loaded (lazily: a workload's own
kernels), read as NVML's figure for the process minus torch's reserve, or minus XLA's pool
where it was preallocated to its limit (a JAX probe within a budget). A framework's trace
cannot see it; the records can, per framework, device kind and workload."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from membench import paths

PROCESS = "peak_device_process_bytes"
RESERVED = "peak_device_reserved_bytes"


@dataclass(frozen=True)
class Overhead:
    """One GPU record's process figure beyond torch's reserve."""

    source: str  # the record's path, relative to the results folder
    device_kind: str
    workload: str
    bytes: float
    framework: str = "torch"


def measured_overheads(results: Path | None = None) -> list[Overhead]:
    """Every torch GPU record's (cells and capacity probes) process minus reserve, and every
    JAX GPU record's process minus the pool it preallocated (XLA's limit)."""
    from membench.gpu_predict.records import gpu_records, limit_of

    root = results if results is not None else paths.RESULTS
    found = []
    for path, record in gpu_records(root):
        m, framework = record.metrics, record.cell.framework
        if PROCESS not in m:
            continue
        if framework == "torch" and RESERVED in m:
            held = m[RESERVED]
        elif framework == "jax" and (pool := limit_of(path, record)) is not None:
            held = pool
        else:
            continue
        device_kind = str(record.environment.get("device_name", ""))
        source = str(path.relative_to(root))
        found.append(
            Overhead(source, device_kind, record.cell.workload, m[PROCESS] - held, framework)
        )
    return found


def process_overhead(
    overheads: list[Overhead], workload: str, device_kind: str, exclude: str = "",
    framework: str = "torch", highest: bool = False,
) -> tuple[float, str] | None:  # fmt: skip
    """The median (highest) overhead of the framework's records of this workload on this
    device kind (else of any workload on it, else of any device), the record `exclude` left
    out; with what it is the median (highest) of. None where no record has one."""
    usable = [o for o in overheads if o.source != exclude and o.framework == framework]
    for label, chosen in (
        (f"{workload} on {device_kind}", [o for o in usable if o.device_kind == device_kind
                                          and o.workload == workload]),
        (f"every workload on {device_kind}", [o for o in usable
                                              if o.device_kind == device_kind]),
        ("every GPU record", usable),
    ):  # fmt: skip
        if chosen:
            pick, word = (max, "highest") if highest else (statistics.median, "median")
            return pick(o.bytes for o in chosen), f"{word} of {len(chosen)} ({label})"
    return None
