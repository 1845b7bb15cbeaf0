"""The cells the GPU records measured, as predictions ask for them: each ok record of a device
kind (cells and capacity probes), with the allocator limit it ran under where a capacity budget
set one (torch: its memory fraction of the card as torch counts it; JAX: XLA's bytes_limit)."""

from __future__ import annotations

from pathlib import Path

from membench import paths
from membench.gpu_predict.cards import card_of_device
from membench.records import CorruptRecordError, ProbeBudget, Record, read_record

# the variable that carried a probe's budget as a fraction before ProbeBudget (older records)
OLD_BUDGET_FRACTION = "MEMBENCH_DEVICE_BUDGET_FRACTION"


def gpu_records(results: Path, device_kind: str) -> list[tuple[Path, Record]]:
    """Every ok record of torch or JAX measured on a GPU of this kind, cells and probes."""
    found = []
    for top in paths.measured_roots(results):
        for path in paths.record_files(top):
            try:
                record = read_record(path)
            except (CorruptRecordError, OSError, ValueError):
                continue  # a capacity search's results or a guess, not a record
            env = record.environment
            if record.status != "ok" or env.get("device") != "cuda":
                continue
            if env.get("device_name") == device_kind and record.cell.world_size == 1:
                found.append((path, record))
    return found


def limit_of(record: Record) -> int | None:
    """The allocator limit a capacity budget set for the record's process (None: none)."""
    env = record.environment
    if record.cell.framework == "jax" and env.get("xla_preallocate") == "true":
        return int(env["xla_bytes_limit"]) if env.get("xla_bytes_limit") else None
    budget = ProbeBudget.of_record(record)
    fraction = budget.device_fraction if budget else (env.get("env") or {}).get(OLD_BUDGET_FRACTION)
    if record.cell.framework == "torch" and fraction:
        # a memory fraction is of CUDA's total, not of NVML's
        c = card_of_device(str(env.get("device_name")))
        total = (c.cuda_total_bytes if c else None) or env.get("gpu_memory_bytes")
        return int(float(fraction) * float(total)) if total else None
    return None


def gpu_record_cells(results: Path, device_kind: str) -> list[tuple[dict, int | None, list[str]]]:
    """The distinct (cell, limit) pairs of the device kind's torch and JAX records, each with
    the records it stands for (their paths under results: what its prediction is held to)."""
    seen: dict[tuple[str, int | None], tuple[dict, list[str]]] = {}
    for path, record in gpu_records(results, device_kind):
        if record.cell.framework not in ("torch", "jax"):
            continue
        entry = seen.setdefault((record.cell.key, limit_of(record)), (record.cell.to_dict(), []))
        entry[1].append(str(path.relative_to(results)))
    ordered = sorted(seen.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))
    return [(cell, limit, sources) for (_, limit), (cell, sources) in ordered]
