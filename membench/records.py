"""Cells, Records and the record store; capacity results files.

A Cell names one measurement; a Record is how it ended. The store keeps one JSON file
per cell, written atomically, so an interrupted run keeps every finished cell.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Status = Literal["ok", "oom", "unsupported", "timeout", "error"]
STATUSES: tuple[str, ...] = ("ok", "oom", "unsupported", "timeout", "error")
# Statuses that are a property of the cell, not of one unlucky run: resume keeps them.
FINAL_STATUSES: frozenset[str] = frozenset({"ok", "oom", "unsupported"})


class CorruptRecordError(ValueError):
    """A record file that cannot be read whole."""

    def __init__(self, path: Path, why: str):
        self.path = path
        super().__init__(f"corrupt record file {path}: {why}")


# asv's strategy parameter names a cell of W > 1 ranks "<strategy>@w<W>" (asv has no world-size
# parameter of its own); the suite writes it and the loader reads it back.
RANKS_MARK = "@w"


def parse_strategy_param(param: str) -> tuple[str, int]:
    """(strategy, world size) of an asv strategy parameter."""
    name, _, ranks = param.partition(RANKS_MARK)
    return name, int(ranks or 1)


@dataclass(frozen=True)
class Cell:
    workload: str
    framework: str
    strategy: str
    batch_size: int  # the global batch: split evenly over the ranks
    preset: str
    world_size: int = 1  # data-parallel ranks (devices)

    @property
    def key(self) -> str:
        key = f"{self.workload}--{self.framework}--{self.strategy}--bs{self.batch_size}"
        # one rank keeps the key it had before cells had ranks: committed records still load
        return key if self.world_size == 1 else f"{key}--w{self.world_size}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.world_size == 1:
            del data["world_size"]
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cell:
        return cls(
            workload=str(data["workload"]),
            framework=str(data["framework"]),
            strategy=str(data["strategy"]),
            batch_size=int(data["batch_size"]),
            preset=str(data["preset"]),
            world_size=int(data.get("world_size", 1)),
        )


@dataclass
class Record:
    cell: Cell
    status: Status
    reason: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    step_times: list[float] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    wall_seconds: float = 0.0
    # each rank's (or device's) own metrics, in rank order; empty for a one-rank cell
    ranks: list[dict[str, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cell"] = self.cell.to_dict()
        if not self.ranks:
            del data["ranks"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        status = data["status"]
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        return cls(
            cell=Cell.from_dict(data["cell"]),
            status=status,
            reason=str(data.get("reason", "")),
            metrics={k: float(v) for k, v in data.get("metrics", {}).items()},
            step_times=[float(t) for t in data.get("step_times", [])],
            environment=dict(data.get("environment", {})),
            started_at=str(data.get("started_at", "")),
            wall_seconds=float(data.get("wall_seconds", 0.0)),
            ranks=[{k: float(v) for k, v in r.items()} for r in data.get("ranks", [])],
        )


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader never sees half a file, even if we are killed mid-write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes files private; records are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_record(path: Path) -> Record:
    try:
        data = json.loads(path.read_text())
        return Record.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CorruptRecordError(path, f"{type(exc).__name__}: {exc}") from exc


class RecordStore:
    """One directory of records, one file per cell key."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    def path(self, cell: Cell) -> Path:
        return self.root / f"{cell.key}.json"

    def log_path(self, cell: Cell) -> Path:
        return self.root / "logs" / f"{cell.key}.log"

    def get(self, cell: Cell) -> Record | None:
        """The stored record of a cell, None if absent. Raises CorruptRecordError."""
        path = self.path(cell)
        if not path.exists():
            return None
        record = read_record(path)
        if record.cell != cell:
            raise CorruptRecordError(path, f"holds cell {record.cell}, expected {cell}")
        return record

    def put(self, record: Record) -> Path:
        path = self.path(record.cell)
        write_json_atomic(path, record.to_dict())
        return path

    def records(self) -> Iterator[Record]:
        """Every record in the store; a corrupt file raises, naming the file."""
        for path in sorted(self.root.glob("*.json")):
            yield read_record(path)


# -- capacity searches (membench.capacity): one JSON file per capacity run -----------------
@dataclass
class CapacityResult:
    workload: str
    framework: str
    strategy: str
    preset: str
    budget_bytes: float
    budget_layer: str
    budget_enforced: bool
    note: str
    largest_fit: int
    smallest_non_fit: int | None
    status: str  # ok, or the status that stopped the search before any fit
    reason: str
    probes: list[dict]
    throughput_at_largest_fit: float | None = None
    # peak = fixed + per_sample x batch over the probes that ran (None with fewer than two)
    fit_fixed_bytes: float | None = None
    fit_per_sample_bytes: float | None = None
    fit_r2: float | None = None


def save_capacity_results(results: list[CapacityResult], path: Path) -> None:
    """All searches of a run in one JSON file, rewritten atomically after each search."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    os.chmod(tmp, 0o644)
    tmp.replace(path)


def load_capacity_results(path: Path) -> list[CapacityResult]:
    try:
        data = json.loads(path.read_text())
        return [CapacityResult(**item) for item in data]
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"{path}: not a capacity results file ({exc})") from None
