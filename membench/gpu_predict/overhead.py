"""What a GPU process holds beside its framework's allocator, as the GPU records measured it:
the CUDA context, the libraries' handles and the kernels loaded (lazily: a workload's own
kernels), read as NVML's figure for the process minus torch's reserve. A framework's trace
cannot see it; the records can, per device kind and workload."""

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


def measured_overheads(results: Path | None = None) -> list[Overhead]:
    """Every torch GPU record's (cells and capacity probes) process minus reserve."""
    from membench.gpu_predict.records import gpu_records

    root = results if results is not None else paths.RESULTS
    found = []
    for path, record in gpu_records(root):
        m = record.metrics
        if record.cell.framework == "torch" and PROCESS in m and RESERVED in m:
            device_kind = str(record.environment.get("device_name", ""))
            source = str(path.relative_to(root))
            found.append(
                Overhead(source, device_kind, record.cell.workload, m[PROCESS] - m[RESERVED])
            )
    return found


def torch_overhead(
    overheads: list[Overhead], workload: str, device_kind: str, exclude: str = ""
) -> tuple[float, str] | None:
    """The median overhead of the records of this workload on this device kind (else of any
    workload on it, else of any device), the record `exclude` left out; with what it is the
    median of. None where no record has one."""
    usable = [o for o in overheads if o.source != exclude]
    for label, chosen in (
        (f"{workload} on {device_kind}", [o for o in usable if o.device_kind == device_kind
                                          and o.workload == workload]),
        (f"every workload on {device_kind}", [o for o in usable
                                              if o.device_kind == device_kind]),
        ("every GPU record", usable),
    ):  # fmt: skip
        if chosen:
            return statistics.median(o.bytes for o in chosen), f"median of {len(chosen)} ({label})"
    return None
