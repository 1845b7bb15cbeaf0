"""`membench calibrate`: measure the memory model's calibration cells and store each
framework version's constants (membench.memory.calibration) with their provenance.

The cells are the `calibrate` preset's (registry.CALIBRATION_PRESET: baseline and inference
at sizes no judged preset measures), run by the ordinary runner, one fresh worker each.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from membench import paths, registry
from membench.cells import supervision
from membench.cells.progress import run_with_progress
from membench.environment import detected_device, git_commit, machine_name
from membench.memory import calibration
from membench.records import Record, RecordStore


def calibration_cells(workloads: Sequence[str], frameworks: Sequence[str]) -> list:
    from membench.cells.planning import cells_for

    p = registry.CALIBRATION_PRESET
    return cells_for(workloads, frameworks, registry.CALIBRATION_STRATEGIES, p)


def run_calibration(
    workloads: Sequence[str],
    frameworks: Sequence[str],
    results: Path | None = None,
    fresh: bool = False,
    options: supervision.WorkerOptions = supervision.DEFAULT_OPTIONS,
) -> list[Path]:
    """Measure the calibration cells (each worker launched with the run's options), then fit
    and save one calibration per framework; returns the files written."""
    commit = git_commit()
    machine = machine_name()
    store = RecordStore(paths.calibration_records(machine, str(commit["commit"]), results))
    cells = calibration_cells(workloads, frameworks)
    result = run_with_progress(cells, store, supervision.RunControl(fresh=fresh, worker=options))
    kind = "gpu" if detected_device() == "cuda" else "cpu"
    provenance = {
        "machine": machine,
        "commit": str(commit["commit"]),
        "dirty": bool(commit["dirty"]),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "records": str(store.root),
    }
    written = []
    for framework in frameworks:
        records = [r for r in result.records if r.cell.framework == framework]
        if not any(r.status == "ok" for r in records):
            continue
        cal = calibration.calibrate(_latest_version(records), kind, provenance)
        written.append(calibration.save(cal, results))
    return written


def _latest_version(records: list[Record]) -> list[Record]:
    """The records of the version the ok cells ran (a store may hold failures of none)."""
    ok = [r for r in records if r.status == "ok"]
    version = ok[-1].environment.get("framework_version")
    return [r for r in ok if r.environment.get("framework_version") == version]
