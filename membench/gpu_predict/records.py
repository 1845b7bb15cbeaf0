"""The cells the GPU records measured, as predictions ask for them: each ok record of a device
kind (cells and capacity probes), with the allocator limit it ran under where a capacity budget
set one (torch: its memory fraction of the card as torch counts it; JAX: XLA's bytes_limit)."""

from __future__ import annotations

from pathlib import Path

from membench import paths
from membench.gpu_predict.cards import card_of_device
from membench.records import (
    CorruptRecordError,
    ProbeBudget,
    Record,
    load_capacity_results,
    read_record,
)


def gpu_records(results: Path, device_kind: str | None = None) -> list[tuple[Path, Record]]:
    """Every ok record of one rank measured on a GPU (of this kind, where given), cells and
    probes."""
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
            if device_kind in (None, env.get("device_name")) and record.cell.world_size == 1:
                found.append((path, record))
    return found


def limit_of(path: Path, record: Record) -> int | None:
    """The allocator limit a capacity budget set for the record's process (None: none)."""
    env = record.environment
    if record.cell.framework == "jax" and env.get("xla_preallocate") == "true":
        return int(env["xla_bytes_limit"]) if env.get("xla_bytes_limit") else None
    if record.cell.framework != "torch":
        return None
    budget = ProbeBudget.of_record(record) or _run_budget(path, env.get("gpu_memory_bytes"))
    if budget is None or budget.device_fraction is None:
        return None
    # a memory fraction is of CUDA's total, not of NVML's
    c = card_of_device(str(env.get("device_name")))
    total = (c.cuda_total_bytes if c else None) or budget.device_bytes
    return int(budget.device_fraction * total)


def _run_budget(path: Path, device_bytes: object) -> ProbeBudget | None:
    """A probe's budget from its capacity run's results (records from before a record kept
    its own): the run's folder holds the probes' folders and its results file."""
    run = path.parent.parent
    if not device_bytes or not (run / paths.CAPACITY_FILE).is_file():
        return None
    try:
        results = load_capacity_results(run / paths.CAPACITY_FILE)
    except ValueError:
        return None
    return ProbeBudget(int(results[0].budget_bytes), int(device_bytes)) if results else None


def gpu_record_cells(results: Path, device_kind: str) -> list[tuple[dict, int | None, list[str]]]:
    """The distinct (cell, limit) pairs of the device kind's torch and JAX records, each with
    the records it stands for (their paths under results: what its prediction is held to)."""
    seen: dict[tuple[str, str, int | None], tuple[dict, list[str]]] = {}
    for path, record in gpu_records(results, device_kind):
        if record.cell.framework not in ("torch", "jax"):
            continue
        limit = limit_of(path, record)
        key = (record.cell.key, record.cell.preset, limit)  # a key's sizes are its preset's
        entry = seen.setdefault(key, (record.cell.to_dict(), []))
        entry[1].append(str(path.relative_to(results)))
    ordered = sorted(seen.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0))
    return [(cell, limit, sources) for (_, _, limit), (cell, sources) in ordered]
