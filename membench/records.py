"""Cells, Records and the record store; capacity results files.

A Cell names one measurement; a Record is how it ended. The store keeps one JSON file
per cell, written atomically, so an interrupted run keeps every finished cell. Every record
carries its schema version; reading checks every field, and that each metric is a finite
number of its catalogue kind: a file that fails is named with its reason, never half-read.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from membench import file_rules
from membench.file_rules import UnusableFileError

Status = Literal["ok", "oom", "unsupported", "timeout", "error"]
STATUSES: tuple[str, ...] = ("ok", "oom", "unsupported", "timeout", "error")
# Statuses that are a property of the cell, not of one unlucky run: resume keeps them.
FINAL_STATUSES: frozenset[str] = frozenset({"ok", "oom", "unsupported"})


# The record layout written now; records written before the field existed read as 1.
SCHEMA_VERSION = 2
# A run stops before a cell when the store's file system has less free than this.
MIN_FREE_BYTES = 64 * 2**20
# Room a worker takes for its record before it measures (a record is about 10 KB).
RECORD_ROOM_BYTES = 2**20
# The errors of a file system without room: a full disk, a spent quota.
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# A worker's exit status when its record found no room (membench.measure.worker): the runner then
# names the cause, which the worker's log, on the same full disk, may not hold.
NO_SPACE_EXIT = 28  # ENOSPC's number


class CorruptRecordError(ValueError):
    """A record file that cannot be read whole."""

    def __init__(self, path: Path, why: str, what: str = "corrupt record file"):
        self.path = path
        self.why = why
        super().__init__(f"{what} {path}: {why}")


class NotARecordError(CorruptRecordError):
    """A JSON file in a store that is no record at all (a stray config.json)."""

    def __init__(self, path: Path, why: str):
        super().__init__(path, why, "not a record:")


class RecordNotSavedError(RuntimeError):
    """A finished record the store could not write (a full disk): it travels with the error."""

    def __init__(self, record: Record, path: Path, exc: OSError):
        self.record = record
        super().__init__(f"cannot write the record of {record.cell.key} to {path}: {exc}")


class StoreFullError(RuntimeError):
    """Too little free space left to store the next cell's record and log."""


def _number(value: Any, what: str) -> float:
    """A finite number (a JSON int or float, never a string or a boolean)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} is {value!r}, not a number")
    if not math.isfinite(value):
        raise ValueError(f"{what} is {value}, not a finite number")
    return float(value)


def _text(value: Any, what: str, empty: bool = True) -> str:
    if not isinstance(value, str) or (not empty and not value):
        raise ValueError(f"{what} is {value!r}, not a{'' if empty else ' non-empty'} string")
    return value


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} is {value!r}, not a positive integer")
    return value


def checked_metrics(data: Any, what: str = "metric") -> dict[str, float]:
    """Metrics as the catalogue knows them: finite numbers, below zero only where the
    metric's kind allows (a fraction, a difference); a metric not in the catalogue is kept
    (the loader reports it) but must still be a finite number."""
    from membench.metrics import METRICS

    if not isinstance(data, dict):
        raise ValueError(f"{what}s are {type(data).__name__}, not a mapping")
    out = {}
    for name, value in data.items():
        number = _number(value, f"{what} {name}")
        known = METRICS.get(name)
        if number < 0 and known is not None and not known.may_be_negative:
            raise ValueError(f"{what} {name} is {number}, below zero ({known.unit})")
        out[str(name)] = number
    return out


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
        if not isinstance(data, dict):
            raise ValueError(f"cell is {data!r}, not a mapping")
        return cls(
            workload=_text(data["workload"], "cell workload", empty=False),
            framework=_text(data["framework"], "cell framework", empty=False),
            strategy=_text(data["strategy"], "cell strategy", empty=False),
            batch_size=_count(data["batch_size"], "cell batch_size"),
            preset=_text(data["preset"], "cell preset", empty=False),
            world_size=_count(data.get("world_size", 1), "cell world_size"),
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
        data["schema"] = SCHEMA_VERSION
        if not self.ranks:
            del data["ranks"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        """A record from its JSON, every field checked (ValueError, KeyError, TypeError)."""
        schema = data.get("schema", 1)
        if isinstance(schema, bool) or not isinstance(schema, int) or schema < 1:
            raise ValueError(f"schema is {schema!r}, not a version number")
        if schema > SCHEMA_VERSION:
            raise ValueError(
                f"schema version {schema}: written by a newer membench (this one reads up to "
                f"{SCHEMA_VERSION})"
            )
        status = data["status"]
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        steps, ranks = data.get("step_times", []), data.get("ranks", [])
        environment = data.get("environment", {})
        if not isinstance(steps, list) or not isinstance(ranks, list):
            raise ValueError("step_times and ranks must be lists")
        if not isinstance(environment, dict):
            raise ValueError(f"environment is {type(environment).__name__}, not a mapping")
        times = [_number(t, "a step time") for t in steps]
        if any(t < 0 for t in times):
            raise ValueError("a step time is below zero")
        wall = _number(data.get("wall_seconds", 0.0), "wall_seconds")
        if wall < 0:
            raise ValueError(f"wall_seconds is {wall}, below zero")
        return cls(
            cell=Cell.from_dict(data["cell"]),
            status=status,
            reason=_text(data.get("reason", ""), "reason"),
            metrics=checked_metrics(data.get("metrics", {})),
            step_times=times,
            environment=environment,
            started_at=_text(data.get("started_at", ""), "started_at"),
            wall_seconds=wall,
            ranks=[checked_metrics(r, f"rank {i} metric") for i, r in enumerate(ranks)],
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


class ReservedJson:
    """A JSON file whose room on disk is taken first and its content written later, so that
    a disk that fills meanwhile cannot cost it. The room is a file without a name (O_TMPFILE,
    posix_fallocate): a process killed before writing leaves nothing behind. Written, it is
    linked in whole (a reader never sees half of it). Where the file system has no unnamed
    files, nothing is reserved and write is write_json_atomic. OSError (ENOSPC where there
    is no room) from the reservation or the write."""

    def __init__(self, path: Path, size: int = RECORD_ROOM_BYTES):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fd: int | None = None
        try:
            fd = os.open(path.parent, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno in NO_SPACE_ERRNOS:
                raise
            return  # no unnamed files here (EOPNOTSUPP and the like): no reservation
        try:
            os.posix_fallocate(fd, 0, size)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def write(self, data: Any) -> None:
        """The content, into the room taken (beyond it only where the disk has room)."""
        if self.fd is None:
            write_json_atomic(self.path, data)
            return
        body = memoryview(json.dumps(data, indent=1, sort_keys=True).encode())
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            done = 0
            while done < len(body):
                done += os.pwrite(self.fd, body[done:], done)
            os.ftruncate(self.fd, len(body))  # gives the rest of the room back
            os.fsync(self.fd)
            os.fchmod(self.fd, 0o644)  # the umask aside: records are for everyone to read
            # the unnamed file gets its name (a dir_fd makes os.link call linkat, following
            # /proc's link to the file; plain link(2) would link the link)
            folder = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.link(f"/proc/self/fd/{self.fd}", tmp.name, dst_dir_fd=folder)
            finally:
                os.close(folder)
            os.replace(tmp, self.path)
        finally:
            os.close(self.fd)
            self.fd = None
            tmp.unlink(missing_ok=True)


def no_room_record(cell: Cell, log_path: Path) -> Record:
    """The record of a worker that found no room for its record file (NO_SPACE_EXIT): the one
    it printed to its log where the log had room (its figures kept, the cause noted), else an
    error naming the cause."""
    cause = f"no space left on device (ENOSPC) for the worker's record in {log_path.parent}"
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in reversed(lines):
        try:
            record = (
                Record.from_dict(file_rules.loads(line)) if line.startswith('{"cell"') else None
            )
        except (ValueError, KeyError, TypeError):
            continue
        if record is not None and record.cell == cell:
            record.environment["record_file_error"] = f"{cause}: kept from the worker's log"
            return record
    return Record(cell, "error", f"{cause}; the measurement, if any, is lost")


def read_record(path: Path) -> Record:
    """The record in path, checked whole; CorruptRecordError (NotARecordError for JSON that
    is no record) names the file and why."""
    try:
        data = file_rules.load_json(path)  # no link, FIFO or nesting past the parser
    except UnusableFileError as exc:
        raise CorruptRecordError(path, f"{file_rules.kind(path)}, not a file") from exc
    except (OSError, ValueError) as exc:
        raise CorruptRecordError(path, f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(data, dict) or not {"cell", "status"} & data.keys():
        raise NotARecordError(path, "JSON without a record's cell and status")
    try:
        return Record.from_dict(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptRecordError(path, f"{type(exc).__name__}: {exc}") from exc


class RecordStore:
    """One directory of records, one file per cell key."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    def path(self, cell: Cell) -> Path:
        return self.root / f"{cell.key}.json"

    def log_path(self, cell: Cell) -> Path:
        return self.root / "logs" / f"{cell.key}.log"

    def timeline_path(self, cell: Cell) -> Path:
        """The cell's memory timeline (membench.instruments.timeline), named by its record."""
        return self.root / "timelines" / f"{cell.key}.parquet"

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
        """Store a record (atomically); RecordNotSavedError, holding it, where it cannot be."""
        path = self.path(record.cell)
        try:
            write_json_atomic(path, record.to_dict())
        except OSError as exc:
            raise RecordNotSavedError(record, path, exc) from exc
        return path

    def check_space(self, needed: int = MIN_FREE_BYTES) -> None:
        """StoreFullError if the store's file system has less than `needed` bytes free."""
        probe = self.root if self.root.exists() else self.root.parent
        while not probe.exists():
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        if free < needed:
            raise StoreFullError(
                f"{free / 2**20:.0f} MiB free on the file system of {self.root} (a cell needs "
                f"{needed / 2**20:.0f} MiB): free some space, then run the same command again "
                "to resume"
            )

    def records(self) -> Iterator[Record]:
        """Every record in the store; a corrupt file raises, naming the file."""
        for path in sorted(self.root.glob("*.json")):
            yield read_record(path)

    def scan(self) -> tuple[list[Record], list[CorruptRecordError]]:
        """Every good record in the store, and every file that is not one (with why)."""
        good, bad = [], []
        for path in sorted(self.root.glob("*.json")):
            try:
                good.append(read_record(path))
            except CorruptRecordError as exc:
                bad.append(exc)
        return good, bad


# -- capacity searches (membench.capacity.search): one JSON file per capacity run -----------------
# A search the preset leaves out (its reason in the result): kept in the results, never probed,
# so that a table says why a framework x strategy has no answer.
LEFT_OUT = "left-out"
# A search whose probes are stored but which never wrote its answer (interrupted, killed, out
# of time): the results read it from its probes, and it decides no batch (analysis.loader).
UNSETTLED = "unsettled"

# The variable that carries a probe's budget into its worker (and so into its record's env).
PROBE_BUDGET_ENV = "MEMBENCH_PROBE_BUDGET"


@dataclass(frozen=True)
class ProbeBudget:
    """The memory budget a capacity probe runs under: one value from `membench capacity` to
    the probe's worker and into its record. On a GPU it holds the device's total as well, of
    which the worker's framework takes the budget's share as its own limit (device_fraction);
    a host budget is not imposed, only read on the record's peak. Written into a worker's
    environment by env() and read back by of_env() (the worker) or of_record() (a record
    keeps the variable), nowhere else."""

    bytes: int
    device_bytes: int | None = None  # the GPU's total memory; None on a host

    def __post_init__(self) -> None:
        if self.bytes <= 0 or (self.device_bytes is not None and self.device_bytes <= 0):
            raise ValueError(f"a probe's budget and its device's memory must be positive: {self}")

    @property
    def device_fraction(self) -> float | None:
        """The share of the device's memory the budget is (all of it at most); None on a host."""
        return min(1.0, self.bytes / self.device_bytes) if self.device_bytes else None

    def env(self) -> dict[str, str]:
        return {PROBE_BUDGET_ENV: json.dumps(asdict(self))}

    @classmethod
    def of_env(cls, environ: Mapping[str, str] | None = None) -> ProbeBudget | None:
        """The budget a worker was launched with (None: not a capacity probe)."""
        raw = (os.environ if environ is None else environ).get(PROBE_BUDGET_ENV, "")
        if not raw:
            return None
        try:
            return cls(**json.loads(raw))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{PROBE_BUDGET_ENV}={raw!r} is not a probe budget: {exc}") from None

    @classmethod
    def of_record(cls, record: Record) -> ProbeBudget | None:
        """The budget a probe's record ran under (None: not a probe, or one from before the
        budget was carried)."""
        env = record.environment.get("env")
        return cls.of_env(env) if isinstance(env, Mapping) else None


def timestamp() -> str:
    """Now, as records and results date themselves (ISO 8601, UTC, to the second): one form,
    so that their dates compare as text (analysis.loader's run_at sets them side by side)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


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
    status: str  # ok, the status that stopped the search before any fit, or LEFT_OUT
    reason: str
    probes: list[dict]
    throughput_at_largest_fit: float | None = None
    # peak = fixed + per_sample x batch over the probes that ran (None with fewer than two)
    fit_fixed_bytes: float | None = None
    fit_per_sample_bytes: float | None = None
    fit_r2: float | None = None
    # the memory model's largest batch within the budget, before any probe (None: no model)
    predicted_batch: int | None = None
    prediction_basis: str = ""  # "calibrated (...)", "spec-only" or XLA's (search.Guess.basis)
    # batches measured for the prediction (XLA's first-run extra; the calibration cells of the
    # strategy's own fit on this machine): where the answer or the next batch is one of them,
    # the prediction is not scored against it
    prediction_measured_batches: list[int] = field(default_factory=list)
    search: str = "bisection"  # guided (from the model's prediction) or bisection
    # probes plain bisection from the first step would have taken to the same boundary
    bisection_probes: int | None = None
    # the boundary against its noise: probes per boundary batch, the peaks of the answer's
    # repeats and of the next batch's, the answer's room below the budget (budget minus its
    # highest peak), the next batch's excess (its mean peak minus the budget), the larger
    # spread (max - min) of the two batches' repeats
    repeats: int = 1
    fit_peaks_bytes: list[float] = field(default_factory=list)
    non_fit_peaks_bytes: list[float] = field(default_factory=list)
    margin_bytes: float | None = None
    over_bytes: float | None = None
    spread_bytes: float | None = None
    # True: the answer stands only with the spread to spare (margin >= spread); searches
    # written before that rule may publish an answer within its noise
    noise_room: bool = False
    # the measured steps' own peak at the answer (steady state, beside the whole-life one)
    steady_peak_at_fit_bytes: float | None = None
    # the foreign CPU share of the record the answer's speed comes from (busy: no speed)
    foreign_cpu_share_at_fit: float | None = None
    # a card's whole budget (budget_layer: NVML's process figure): the framework's allocator
    # limit the search set, the budget less the process overhead, and the answer's room below
    # it (its highest allocator peak), beside margin_bytes, its room below the card
    limit_bytes: float | None = None
    limit_margin_bytes: float | None = None
    compile_cache: str = ""  # the state of the framework's compile cache across the probes
    # the memory model's largest batch with the calibrations at hand now (the search's own,
    # then rewritten by membench predict as they change), not capped by the search's largest
    # batch: never a guide here, scored against the verified answer beside the first guess
    # (for JAX, XLA's)
    model_batch: int | None = None
    model_basis: str = ""
    # when the run wrote this result (ISO 8601, UTC; "" in files written before it): what
    # dates a run whose searches are all left out, which has no probe to date it by
    written_at: str = ""


def save_capacity_results(results: list[CapacityResult], path: Path) -> None:
    """All searches of a run in one JSON file, rewritten atomically after each search."""
    save_capacity_items([asdict(r) for r in results], path)


def save_capacity_items(items: list[dict[str, Any]], path: Path) -> None:
    """A capacity results file from its searches' JSON, atomically, in the form runs write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(items, indent=1) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_capacity_results(path: Path) -> list[CapacityResult]:
    try:
        data = file_rules.load_json(path)
        return [CapacityResult(**item) for item in data]
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"{path}: not a capacity results file ({exc})") from None


def allow_busy(record: Record, store: RecordStore) -> Record:
    """Mark a record measured on a busy host as recorded anyway (--allow-busy), in its store."""
    from membench.metrics import BUSY_ALLOWED

    record.environment[BUSY_ALLOWED] = True
    store.put(record)
    return record
