"""The state a framework's on-disk compile cache is in when a measured cell meets it.

Where a framework keeps compiled code on disk (Jittor), a cell that meets a cold cache forks
compilers whose memory counts in its whole-life peak (three of 4559b47's Jittor calibration
cells at 224x224 held 686-1029 MiB of them, against 52-86 MiB warm). Capacity searches and
calibrations therefore warm the cache first, with cells at the two smallest batches a search
probes, kept apart from the measured ones; the other frameworks compile in each process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from membench import paths, registry
from membench.metrics import LIFE_OTHERS_METRIC
from membench.records import Cell, Record, RecordStore


def warm_up_batches(step: int) -> tuple[int, int]:
    """The strategy's step (its micro-batch count) and twice it: Jittor compiles other kernels
    where a dimension is 1 (the Transformer warmed at batch 1 alone compiled 57 more operators
    at its first probe above it, 318 MiB of compilers in that probe's whole life, and none at
    the six batches after it)."""
    return step, 2 * step


def warm_up_store(store: RecordStore) -> RecordStore:
    """Where the cells that warmed the cache for a store's cells are kept, beside it."""
    return RecordStore(paths.warm_up_probes(store.root))


def warm_up_cells(cells: Sequence[Cell]) -> list[Cell]:
    """The cells that warm the cache for these cells, once per workload, framework, strategy
    and preset whose framework keeps that strategy's compiled code on disk."""
    wanted: dict[tuple, Cell] = {}
    for cell in cells:
        if not registry.framework(cell.framework).caches_compiles(cell.strategy):
            continue
        for batch in warm_up_batches(registry.strategy(cell.strategy).accumulate):
            key = (cell.workload, cell.framework, cell.strategy, cell.preset, batch)
            wanted.setdefault(key, replace(cell, batch_size=batch))
    return list(wanted.values())


def warm_cache(framework: str, strategy: str, step: int, measure: Callable[[int], Record]) -> str:
    """Warm the cache for one search's probes, measure running a cell at a batch; what the
    result says of the cache (the warm-up cells' cold figures included)."""
    if not registry.framework(framework).caches_compiles(strategy):
        return "no compile cache on disk: each probe compiles (where it does) in its own process"
    said = []
    for batch in warm_up_batches(step):
        record = measure(batch)
        cold = record.metrics.get(LIFE_OTHERS_METRIC)
        held = f", its other processes held {cold / 2**20:.0f} MiB" if cold is not None else ""
        said.append(f"{batch} ({record.status}{held})")
    batches = " and ".join(said)
    return f"compile cache on disk, warmed by cells at batches {batches} before the search"
