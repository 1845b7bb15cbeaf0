"""How long a run will take, said before it starts and corrected while it runs.

A cell's estimate is the wall time of an earlier record of the same cell on this machine (in a
version sweep, of the same cell under the same release where one was measured: a release can
be 3x slower on a cell); else
the same strategy's record at the nearest other batch size, its time above the framework x
workload's fastest cell scaled by the batch; else the same cell's records on the suite's other
hosts (their median, scaled by how this machine's times compare with that host's on the cells
both measured: hosts of one label run 1.7-2x apart); else the median of its framework x
workload x preset's cells there (refusals aside); else a prior per framework (a fresh worker's
start, build and compile on two CPU cores, from the committed CPU runs).
No estimate exceeds the cell's time limit (the runner ends it there). A cell the backend's
declarations refuse, or that the run keeps from its store (a resumed run), costs nothing. As
cells finish, each framework x workload's remaining estimates are scaled by how its finished
cells compared with theirs. Framework-free.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from membench import paths, registry
from membench.metrics import STEP_SECONDS_MEAN, WARMUP_STEPS
from membench.records import Cell, CorruptRecordError, Record, RecordStore, read_record
from membench.registry import UnknownNameError
from membench.registry.frameworks import DEFAULT_CPU_CELL_SECONDS

# Seconds per cell before any record exists: each framework's cpu_cell_seconds (registry)
REFUSED = "refused by its backend's declarations (no worker)"
RELEASE_BASIS = "this cell under this release"
KEPT = "kept in the store (resumed)"


@dataclass(frozen=True)
class Estimate:
    seconds: float
    basis: str  # "this cell", "framework x workload", "prior" or REFUSED


MIN_SHARED = 5  # cells two hosts both measured before one's speed scales the other's times


def _group(cell: Cell) -> tuple[str, str, str]:
    return (cell.framework, cell.workload, cell.preset)


class History:
    """Wall times of earlier records on this machine: by cell, by strategy (over batch
    sizes) and by framework x workload."""

    def __init__(
        self,
        records: Iterable[Record],
        elsewhere: Iterable[Record] = (),
        releases: Iterable[tuple[str, Record]] = (),
    ):
        """releases: this machine's version-sweep records with the release each ran under
        (also among records)."""
        records = list(records)
        self.between_cells = _between_cells(records)
        self.by_cell: dict[Cell, list[float]] = defaultdict(list)
        self.by_release: dict[tuple[Cell, str], list[float]] = defaultdict(list)
        for release, r in releases:
            if r.wall_seconds > 0 and r.environment.get("refused_at") != "plan":
                self.by_release[(r.cell, release)].append(r.wall_seconds)
        # the same cells on other hosts: wall times by host and cell
        self.hosts: dict[str, dict[Cell, list[float]]] = defaultdict(lambda: defaultdict(list))
        self._ratios: dict[str, float | None] = {}
        for r in elsewhere:
            if r.wall_seconds > 0 and r.environment.get("refused_at") != "plan":
                self.hosts[str(r.environment.get("machine", ""))][r.cell].append(r.wall_seconds)
        self.by_strategy: dict[Cell, dict[int, list[float]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self.by_group: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        # the part of a record's wall time spent in steps after the first (warm-up and
        # measured): the part that grows with the batch, where the record says
        self.stepping: dict[Cell, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in records:
            # a refusal, or a record without its wall time, says nothing about a measurement
            if r.wall_seconds <= 0 or r.environment.get("refused_at") == "plan":
                continue
            self.by_cell[r.cell].append(r.wall_seconds)
            # a cell the worker refused in seconds says nothing about one that runs
            if r.status == "unsupported":
                continue
            self.by_group[_group(r.cell)].append(r.wall_seconds)
            if r.status in ("ok", "timeout"):  # times that grow with the batch
                self.by_strategy[_strategy(r.cell)][r.cell.batch_size].append(r.wall_seconds)
                if (seconds := _stepping_seconds(r)) is not None:
                    self.stepping[_strategy(r.cell)][r.cell.batch_size].append(seconds)
                if (twin := _inputs(r.cell)) is not None:
                    self.by_strategy[twin][r.cell.batch_size].append(r.wall_seconds)
                    if seconds is not None:
                        self.stepping[twin][r.cell.batch_size].append(seconds)

    @classmethod
    def of_machine(cls, machine: str, extra: Sequence[Path] = ()) -> History:
        """Every readable record of this machine: the committed stores, the local ones, and
        extra folders (the run's own store); a corrupt file is skipped here (the run reports
        it where it matters)."""
        roots = [paths.records_root() / machine, paths.local_stores(machine), *extra]
        # a cell names its preset, and a GPU preset's cells are not a CPU preset's: the other
        # machines' records of the same cell are those of hosts of the same device kind
        others = [r for r in sorted(paths.records_root().glob("*")) if r.name != machine]
        mine = _read_with_paths(roots)
        releases = [(paths.release_of(p), r) for p, r in mine if paths.release_of(p)]
        return cls([r for _, r in mine], [r for _, r in _read_with_paths(others)], releases)

    def _other_batch(self, cell: Cell, key: object = None) -> float | None:
        """The same strategy at the nearest measured batch: its steps after the first grow
        with the batch, the rest (start-up, build, compilation) does not; where the record
        does not say its steps, the time above the group's fastest cell grows instead. key:
        which records count as the same strategy (default: the cell's preset's)."""
        key = key if key is not None else _strategy(cell)
        batches = self.by_strategy.get(key)
        if not batches:
            return None
        nearest = min(batches, key=lambda b: (abs(b - cell.batch_size), b))
        seen = statistics.median(batches[nearest])
        if stepping := self.stepping[key].get(nearest):
            # start-up, build and the first step's compilation stay; the steps scale
            steps = min(statistics.median(stepping), seen)
            return seen - steps + steps * cell.batch_size / nearest
        fixed = min([seen, *self.by_group.get(_group(cell), [])])
        return fixed + (seen - fixed) * cell.batch_size / nearest

    def speed_ratio(self, host: str) -> float | None:
        """How much longer this machine takes than another host, the median over the cells
        both measured (at least MIN_SHARED); None where they share too few."""
        if host in self._ratios:
            return self._ratios[host]
        theirs = self.hosts.get(host, {})
        shared = [c for c in theirs if self.by_cell.get(c)]
        ratios = [statistics.median(self.by_cell[c]) / statistics.median(theirs[c]) for c in shared]
        found = statistics.median(ratios) if len(shared) >= MIN_SHARED else None
        self._ratios[host] = found
        return found

    def _elsewhere(self, cell: Cell) -> tuple[float, str] | None:
        """The cell's time from other hosts' records (their median), each scaled by how this
        machine compared with that host where they share cells."""
        times, scaled = [], 0
        for host, cells in self.hosts.items():
            if not cells.get(cell):
                continue
            ratio = self.speed_ratio(host)
            scaled += ratio is not None
            times.append(statistics.median(cells[cell]) * (ratio or 1.0))
        if not times:
            return None
        how = "scaled by this host's speed on shared cells" if scaled else "unscaled"
        return statistics.median(times), f"this cell on other hosts ({how})"

    def estimate(
        self,
        cell: Cell,
        refused: bool = False,
        kept: bool = False,
        limit: float | None = None,
        release: str = "",
    ) -> Estimate:
        """The cell's estimate; limit (default: the preset's time limit for the cell) caps it.
        release: the sweep's release the cell is measured under ("" outside a sweep)."""
        if kept:
            return Estimate(0.0, KEPT)
        if refused:
            return Estimate(0.0, REFUSED)
        if release and self.by_release.get((cell, release)):
            found = Estimate(statistics.median(self.by_release[(cell, release)]), RELEASE_BASIS)
        elif self.by_cell.get(cell):
            found = Estimate(statistics.median(self.by_cell[cell]), "this cell")
        elif (scaled := self._other_batch(cell)) is not None:
            found = Estimate(scaled, "this strategy at another batch")
        elif (seen := self._elsewhere(cell)) is not None:
            found = Estimate(*seen)
        elif (twin := _inputs(cell)) and (scaled := self._other_batch(cell, twin)) is not None:
            found = Estimate(scaled, "the same inputs in another preset")
        elif self.by_group.get(_group(cell)):
            found = Estimate(statistics.median(self.by_group[_group(cell)]), "framework x workload")
        else:
            found = Estimate(prior_seconds(cell.framework), "prior")
        limit = limit or _time_limit(cell)
        return Estimate(min(found.seconds, limit), found.basis) if limit else found


def _read_with_paths(roots: Iterable[Path]) -> list[tuple[Path, Record]]:
    """Every readable record below the folders, with its file; a corrupt file is skipped here
    (the run reports it where it matters)."""
    records = []
    for root in roots:
        if not root.is_dir():
            continue
        for path in paths.record_files(root):
            try:
                records.append((path, read_record(path)))
            except CorruptRecordError:
                continue
    return records


def _strategy(cell: Cell) -> Cell:
    """The cell with its batch size blanked: the key of a strategy's records over batches."""
    return dataclasses.replace(cell, batch_size=0)


def _inputs(cell: Cell) -> tuple | None:
    """The key of a strategy's records at the cell's inputs, whatever the preset (the version
    sweep's preset has cpu-quick's inputs): None for a preset or workload no longer known."""
    try:
        inputs = registry.preset(cell.preset).size(cell.workload).inputs
    except UnknownNameError:
        return None
    frozen = tuple(sorted(inputs.items()))
    return ("inputs", cell.framework, cell.workload, cell.strategy, cell.world_size, frozen)


def _time_limit(cell: Cell) -> float | None:
    try:
        return registry.preset(cell.preset).cell_timeout(cell.workload)
    except UnknownNameError:
        return None


class Forecast:
    """The remaining time of a run, its estimates corrected as cells finish. between: the
    runner's own seconds around each cell that runs (History.between_cells)."""

    def __init__(self, estimates: dict[Cell, Estimate], between: float = 0.0):
        self.estimates = estimates
        self.pending = dict(estimates)
        self.between = between
        self._actual: dict[tuple[str, str], float] = defaultdict(float)
        self._expected: dict[tuple[str, str], float] = defaultdict(float)

    def _scale(self, cell: Cell) -> float:
        key = (cell.framework, cell.workload)
        expected = self._expected[key]
        return self._actual[key] / expected if expected > 0 else 1.0

    def done(self, record: Record, reused: bool) -> None:
        estimate = self.pending.pop(record.cell, None)
        if estimate is None or reused or estimate.seconds <= 0:
            return
        key = (record.cell.framework, record.cell.workload)
        self._actual[key] += record.wall_seconds
        self._expected[key] += estimate.seconds

    def remaining_seconds(self) -> float:
        return sum(e.seconds * self._scale(c) + self._around(e) for c, e in self.pending.items())

    def total_seconds(self) -> float:
        return sum(e.seconds + self._around(e) for e in self.estimates.values())

    def _around(self, estimate: Estimate) -> float:
        return self.between if estimate.seconds > 0 else 0.0

    def rows(self) -> list[dict[str, object]]:
        """Per framework x workload: cells, estimated minutes, and what the estimates rest on."""
        groups: dict[tuple[str, str], list[Estimate]] = defaultdict(list)
        for cell, e in self.estimates.items():
            groups[(cell.framework, cell.workload)].append(e)
        rows = []
        for (framework, workload), found in sorted(groups.items()):
            bases = defaultdict(int)
            for e in found:
                bases[e.basis] += 1
            rows.append({
                "framework": framework, "workload": workload, "cells": len(found),
                "minutes": sum(e.seconds + self._around(e) for e in found) / 60,
                "basis": ", ".join(f"{n} {basis}" for basis, n in sorted(bases.items())),
            })  # fmt: skip
        return rows


def forecast(
    cells: Sequence[Cell],
    store: RecordStore,
    machine: str,
    fresh: bool = False,
    retry_failed: bool = True,
    timeout: float | None = None,
    cap: float | None = None,
    history: History | None = None,
    release: str = "",
) -> Forecast:
    """The run's forecast: every cell estimated, the refusals from the declarations, the cells
    the run will keep by the runner's own resume rule (fresh, retry_failed, timeout and the
    memory cap as the run's). history: the machine's, where the caller read it already (it
    reads every host's records); release: the sweep's release the cells run under."""
    from membench.cells.planning import declared_refusal, reusable_record

    history = history or History.of_machine(machine, [store.root])
    return Forecast({
        c: history.estimate(
            c,
            refused=declared_refusal(c) is not None,
            kept=reusable_record(c, store, fresh, retry_failed, cap) is not None,
            limit=timeout,
            release=release,
        )
        for c in cells
    }, history.between_cells)  # fmt: skip


MAX_BETWEEN = 60.0  # a longer pause between two records is no run's own: another run began


def _between_cells(records: Sequence[Record]) -> float:
    """The runner's own seconds around a cell (reading the store, starting the worker,
    writing the record): the median pause between one record's end and the next one's start
    on this machine; 0 where no two records follow each other."""
    spans = sorted(
        (start, start + r.wall_seconds)
        for r in records
        if r.wall_seconds > 0 and (start := _start(r)) is not None
    )
    pauses = [b[0] - a[1] for a, b in itertools.pairwise(spans) if 0 <= b[0] - a[1] < MAX_BETWEEN]
    return statistics.median(pauses) if pauses else 0.0


def _start(record: Record) -> float | None:
    try:
        return datetime.fromisoformat(record.started_at).timestamp()
    except ValueError:
        return None


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _stepping_seconds(record: Record) -> float | None:
    """Seconds in the steps after the first (warm-up, measured), from the record's step
    times and warm-up count; None where it has neither."""
    mean = record.metrics.get(STEP_SECONDS_MEAN)
    warmup = record.metrics.get(WARMUP_STEPS)
    if not record.step_times or mean is None or warmup is None:
        return None
    return float(mean) * (float(warmup) + len(record.step_times))


def prior_seconds(framework: str) -> float:
    """A cell's time before any record of its framework exists here: the framework's
    declared prior, or the registry's default for one it does not know."""
    known = registry.FRAMEWORKS.get(framework)
    return known.cpu_cell_seconds if known else DEFAULT_CPU_CELL_SECONDS
