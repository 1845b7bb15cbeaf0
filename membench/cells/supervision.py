"""Supervising a run's cells: each measured by fresh workers (membench.cells.worker_launch),
every ending classified, resumable.

A worker that hangs past its timeout is killed (its whole process group) and recorded as
`timeout`; one that goes over the memory cap is ended as `oom`; one that dies without writing
its record is `error` with its exit status and the tail of its log. Finished cells are kept in
a RecordStore, so an interrupted run resumes where it stopped (which cells, and which are kept
or refused without a worker: membench.cells.planning).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from membench import registry
from membench.cells.planning import declared_refusal, refused_record, reusable_record
from membench.cells.termination import terminate_as_interrupt
from membench.cells.worker_launch import (
    DEFAULT_OPTIONS,
    TRACES,
    WorkerOptions,
    rank_processes,
    run_trace,
    run_worker,
)
from membench.records import Cell, Record, RecordStore


def cell_timeout(cell: Cell, timeout: float | None = None) -> float:
    """The seconds a cell's worker may run: the given limit, else the preset's."""
    return timeout or registry.preset(cell.preset).cell_timeout(cell.workload)


@dataclass
class RunResult:
    records: list[Record]
    measured: int  # cells run now
    reused: int  # cells kept from an earlier (interrupted) run
    deferred: list[Cell] = field(default_factory=list)  # not started: the deadline had passed


# Cells in flight and the node each runs on, reported as they start and end.
OnFlight = Callable[[Mapping[Cell, str]], None]
# Called when an engine resubmits a cell (its node was lost): the cell, and why.
OnRetry = Callable[[Cell, str], None]


@dataclass(frozen=True)
class RunControl:
    """How a run treats its cells and what it reports as they go (every engine's run takes
    one). on_flight and on_retry are for engines that measure several cells at once."""

    timeout: float | None = None  # seconds per cell (default: the preset's)
    fresh: bool = False  # measure stored cells again
    retry_failed: bool = True  # measure stored timeout/error cells again
    deadline: float | None = None  # no cell starts after this (time.monotonic())
    on_start: Callable[[Cell, int, int], None] | None = None  # cell, index, total
    on_done: Callable[[Record, bool], None] | None = None  # record, reused
    on_flight: OnFlight | None = None
    on_retry: OnRetry | None = None
    # framework -> the interpreter its workers run under (a release's environment, the
    # version sweep's); a framework not named runs under its own (membench.interpreters)
    interpreters: Mapping[str, str] = field(default_factory=dict)
    # the memory cap, timeline, trace and workers' environment of every cell's launch
    worker: WorkerOptions = DEFAULT_OPTIONS


DEFAULT_CONTROL = RunControl()  # every engine's default (a shared, frozen instance)


def resume_cap(control: RunControl, engine: str = "local") -> float | None:
    """The memory cap the resume rule compares a cap-ended `oom` with (reusable_record): the
    one this host gives a cell now for the local engine; for a cluster, whose nodes each
    compute their own default, only a cap the run gave (--memory-cap), else None (kept)."""
    return control.worker.cap() if engine == "local" else control.worker.memory_cap


def run(
    cells: Iterable[Cell], store: RecordStore, control: RunControl = DEFAULT_CONTROL
) -> RunResult:
    """Measure cells not already in the store (all of them with control.fresh).

    A stored ok/oom/unsupported record is reused; a stored timeout/error is re-run unless
    retry_failed is False. A corrupt stored record is re-measured, never half-read. A cell
    its backend's declarations refuse is recorded `unsupported` without a worker. No cell
    starts after the deadline; those are returned as deferred, for a rerun.
    """
    cells = list(cells)
    result = RunResult([], 0, 0)
    with terminate_as_interrupt():
        for i, cell in enumerate(cells):
            existing = reusable_record(
                cell, store, control.fresh, control.retry_failed, resume_cap(control)
            )
            if existing:
                result.records.append(existing)
                result.reused += 1
                if control.on_done:
                    control.on_done(existing, True)
                continue
            if control.deadline is not None and time.monotonic() > control.deadline:
                result.deferred.append(cell)
                continue
            store.check_space()  # StoreFullError: stop before measuring what cannot be kept
            if control.on_start:
                control.on_start(cell, i, len(cells))
            python = control.interpreters.get(cell.framework)
            record = measure_cell(cell, store, control.timeout, python, control.worker)
            store.put(record)  # RecordNotSavedError carries the record
            result.records.append(record)
            result.measured += 1
            if control.on_done:
                control.on_done(record, False)
    return result


def measure_cell(
    cell: Cell, store: RecordStore, timeout: float | None = None, python: str | None = None,
    options: WorkerOptions = DEFAULT_OPTIONS,
) -> Record:  # fmt: skip
    """The cell's record: refused from the declarations, or measured by a worker (under
    python where given), with its timeline and the framework's memory view where the options
    ask for them."""
    if reason := declared_refusal(cell):
        return refused_record(cell, reason, options.worker_env())
    path = store.timeline_path(cell) if options.timeline else None
    limit = cell_timeout(cell, timeout)
    record = run_worker(cell, store.log_path(cell), limit, path, python, options)
    if options.trace and record.status == "ok" and rank_processes(cell) == 1:
        record.environment["traces"] = run_trace(
            cell, store.root / TRACES, store.log_path(cell), limit, options
        )
    return record
