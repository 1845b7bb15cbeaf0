"""Which cells a run measures: the cells of a selection as its preset plans them (each
strategy on every workload, or once on its home workload), what the preset leaves to another,
and, per cell, whether its backend refuses it here or a stored record is kept instead of
measuring it again. No process is started here (membench.cells.supervision starts them).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from membench import registry
from membench.backends import BuildSpec
from membench.environment import detected_device, host_environment
from membench.instruments import memory_cap
from membench.records import (
    FINAL_STATUSES,
    Cell,
    CorruptRecordError,
    Record,
    RecordStore,
    timestamp,
)


def cells_for(
    workloads: Sequence[str],
    frameworks: Sequence[str],
    strategies: Sequence[str],
    preset: str,
    batch_sizes: Sequence[int] | None = None,
    world_size: int | None = None,
) -> list[Cell]:
    """Every cell of the selection; names are checked (UnknownNameError lists valid ones).
    A sharding strategy's cells have the preset's world size (or world_size), others one.
    Frameworks are interleaved: each cell of every framework in turn, so that a run's speed
    ratios between frameworks compare cells measured minutes apart, not a framework's whole
    share of the run against another's (a host's load drifts). A preset that runs each
    strategy once (smoke) plans it on its home workload only (strategy_homes)."""
    p = registry.preset(preset)
    for name in workloads:
        registry.workload(name)
    for name in frameworks:
        registry.framework(name)
    for name in strategies:
        registry.strategy(name)
    homes = strategy_homes(
        workloads, frameworks, strategies, preset, (batch_sizes or [None])[0], world_size
    )
    cells = []
    for w in workloads:
        grid = p.size(w).batch_sizes
        for b in batch_sizes or grid:
            for s in strategies:
                for f in frameworks:
                    if _left_to_another(p, homes, f, w, s):
                        continue
                    ranks = registry.world_size_of(registry.strategy(s), p, world_size)
                    cells.append(Cell(w, f, s, int(b), preset, ranks))
    return cells


# The strategy a preset that runs each strategy once still runs on every workload: the other
# strategies' savings are read against it, and every model is built and trained once.
EVERY_WORKLOAD = "baseline"


def strategy_homes(
    workloads: Sequence[str],
    frameworks: Sequence[str],
    strategies: Sequence[str],
    preset: str,
    batch_size: int | None = None,
    world_size: int | None = None,
) -> dict[tuple[str, str], str]:
    """Where a preset that runs each strategy once (Preset.once_per_strategy) runs it, per
    framework x strategy: the first selected workload, in the preset's order, that the preset
    keeps and the backend's declarations accept (else the first it keeps: its refusal is then
    recorded once), asked at batch_size (default: each workload's first) and world_size as the
    run's. Empty for other presets: every strategy runs on every workload."""
    p = registry.preset(preset)
    if not p.once_per_strategy:
        return {}
    rank = {w: i for i, w in enumerate(p.once_per_strategy)}
    ordered = sorted((w for w in workloads if w in p.sizes), key=lambda w: rank.get(w, len(rank)))
    homes = {}
    for f in frameworks:
        for s in strategies:
            if s == EVERY_WORKLOAD:
                continue
            kept = [w for w in ordered if not p.leaves_out(f, w, s)]
            runs = [
                w for w in kept
                if declared_refusal(_first_cell(w, f, s, p, batch_size, world_size)) is None
            ]  # fmt: skip
            if runs or kept:
                homes[(f, s)] = (runs or kept)[0]
    return homes


def _left_to_another(
    p: registry.Preset, homes: dict[tuple[str, str], str], framework: str, workload: str,
    strategy: str,
) -> str | None:  # fmt: skip
    """Why the preset leaves this cell to another (None: it runs it), given its homes."""
    if reason := p.leaves_out(framework, workload, strategy):
        return reason
    if homes.get((framework, strategy), workload) != workload:
        return (
            f"preset {p.name} runs each strategy once per framework, on the first of "
            f"{', '.join(p.once_per_strategy)} that runs it; the cpu preset runs every workload"
        )
    return None


def left_to_another(cell: Cell, workloads: Sequence[str]) -> str | None:
    """Why the cell's preset does not run it within a selection of workloads (None: it does):
    what asv asks of a cell goes by the same plan as a run."""
    p = registry.preset(cell.preset)
    homes = strategy_homes(
        workloads, [cell.framework], [cell.strategy], cell.preset, cell.batch_size,
        cell.world_size,
    )  # fmt: skip
    return _left_to_another(p, homes, cell.framework, cell.workload, cell.strategy)


def _first_cell(
    workload: str, framework: str, strategy: str, p: registry.Preset,
    batch_size: int | None, world_size: int | None,
) -> Cell:  # fmt: skip
    batch = batch_size or p.size(workload).batch_sizes[0]
    ranks = registry.world_size_of(registry.strategy(strategy), p, world_size)
    return Cell(workload, framework, strategy, batch, p.name, ranks)


def left_out(
    workloads: Sequence[str], frameworks: Sequence[str], strategies: Sequence[str], preset: str
) -> dict[str, int]:
    """The selection's cells the preset leaves to another, counted by reason."""
    p = registry.preset(preset)
    homes = strategy_homes(workloads, frameworks, strategies, preset)
    counts: dict[str, int] = {}
    for w in workloads:
        for f in frameworks:
            for s in strategies:
                if reason := _left_to_another(p, homes, f, w, s):
                    counts[reason] = counts.get(reason, 0) + len(p.size(w).batch_sizes)
    return counts


def declared_refusal(cell: Cell) -> str | None:
    """Why the cell's backend refuses it here (Backend.refusal_here; None: a worker runs it).
    A backend that cannot be loaded here is left to the worker, whose record says why."""
    try:
        backend = registry.load_backend(cell.framework)
    except (ImportError, AttributeError):
        return None
    return backend.refusal_here(BuildSpec.of(cell))


def refused_record(cell: Cell, reason: str, run_env: Mapping[str, str] | None = None) -> Record:
    """The record of a cell refused at plan time: no worker, no framework import. run_env:
    the environment the run's workers get (its options), which the record names as theirs."""
    env = {**host_environment(run_env), "device": detected_device(), "refused_at": "plan"}
    started = timestamp()
    return Record(cell, "unsupported", reason, environment=env, started_at=started)


def reusable_record(
    cell: Cell, store: RecordStore, fresh: bool = False, retry_failed: bool = True,
    cap: float | None = None,
) -> Record | None:  # fmt: skip
    """The stored record a run keeps instead of measuring the cell again, if any (every
    engine resumes by this rule). cap: the memory cap this run gives a cell; an `oom` that a
    clearly smaller cap ended is measured again (memory_cap.raised: a run under `--memory-cap
    1GiB` and then without it measures the cell under the larger cap)."""
    if fresh:
        return None
    try:
        existing = store.get(cell)
    except CorruptRecordError as exc:
        print(f"warning: {exc}; measuring the cell again", file=sys.stderr)
        return None
    if existing is None:
        return None
    if memory_cap.raised(cap, memory_cap.ended_under(existing.reason, existing.environment)):
        return None
    if existing.status in FINAL_STATUSES or not retry_failed:
        return existing
    return None
