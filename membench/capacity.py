"""Capacity: the largest batch whose step runs within a memory budget.

Each probe is an ordinary cell measured in a fresh worker process at one batch size. On a GPU
the budget is imposed through the framework's own limit (MEMBENCH_DEVICE_BUDGET_FRACTION,
which each backend turns into its limit) and out-of-memory is real; on a CPU nothing fails,
so the budget is applied to the measured peak host RSS, and the result says so.

The search doubles the batch until a probe does not fit, then bisects between the largest
fit and the smallest non-fit: exactly, or to a chosen relative tolerance (probes are slow),
in multiples of the micro-batch count for accumulation. Framework-free. With a parallel
engine (ray), the searches of different combinations run at once; each stays sequential.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from membench import registry
from membench.backends import DEVICE_BUDGET_ENV
from membench.engines import Engine, LocalEngine
from membench.fitting import linear_fit
from membench.records import CapacityResult, Cell, Record, RecordStore, save_capacity_results
from membench.runner import terminate_as_interrupt

MAX_BATCH = 65_536


@dataclass
class Probe:
    batch_size: int
    status: str
    peak_bytes: float | None
    fits: bool
    reason: str = ""
    layer: str = ""  # the metric peak_bytes was read from


# A probe that ran but emitted none of the budget's metrics: no fit can be decided from it.
NO_PEAK = "no-peak"


@dataclass
class Search:
    """Where the boundary lies: every probe, the largest fit and the smallest non-fit."""

    probes: list[Probe] = field(default_factory=list)
    largest_fit: int = 0
    smallest_non_fit: int | None = None  # None: still fitting at the search's maximum


def bisect(
    probe: Callable[[int], Probe],
    step: int = 1,
    max_batch: int = MAX_BATCH,
    tolerance: float = 0,
    first: int = 1,
) -> Search:
    """Largest multiple of step for which probe(batch).fits, assuming fit is monotone; with
    a tolerance, bisection stops once the non-fit is within that fraction of the fit. The
    doubling starts at first (rounded to the step): probes are slow, a good guess saves some."""
    search = Search()

    def tried(batch: int) -> bool:
        result = probe(batch)
        search.probes.append(result)
        if result.fits:
            search.largest_fit = max(search.largest_fit, batch)
        else:
            small = search.smallest_non_fit
            search.smallest_non_fit = batch if small is None else min(small, batch)
        return result.fits

    batch = max(step, first // step * step)
    while tried(batch):
        if batch * 2 > max_batch:
            return search
        batch *= 2
    low, high = search.largest_fit, search.smallest_non_fit
    assert high is not None
    while high - low > max(step, int(low * tolerance)):
        middle = (low + high) // 2 // step * step
        if middle in (low, high):
            break
        if tried(middle):
            low = middle
        else:
            high = middle
    return search


@dataclass
class Budget:
    bytes: float
    layer: str  # the metric the budget applies to
    enforced: bool  # True where the framework's limit makes exceeding it fail (GPU)
    fallbacks: tuple[str, ...] = ()  # metrics read where a probe lacks `layer`
    unenforced: str = ""  # why a device budget binds no allocation (the framework's own cause)

    @property
    def layers(self) -> tuple[str, ...]:
        return (self.layer, *self.fallbacks)

    @property
    def note(self) -> str:
        if self.enforced:
            return "budget imposed through the framework's device-memory limit; OOM is real"
        measured = " (else ".join(self.layers) + ")" * len(self.fallbacks)
        where = self.unenforced or "CPU: no memory limit was imposed"
        return f"{where}; a batch fits when its measured {measured} stays within the budget"


def budget_for(device: str, budget_bytes: float) -> Budget:
    if device == "cuda":
        return Budget(budget_bytes, "peak_device_allocated_bytes", enforced=True)
    return Budget(budget_bytes, "peak_host_rss_bytes", enforced=False)


def framework_budget(budget: Budget, framework: str, knobs: registry.Strategy) -> Budget:
    """A device budget as one framework keeps it: on its own peak metrics, and enforced only
    where its limit binds (host budgets read peak host RSS, which every framework has)."""
    if not budget.enforced:
        return budget
    backend = type(registry.load_backend(framework))
    layer, *fallbacks = backend.device_peak_layers
    reason = backend.unenforced_device_limit(knobs)
    return Budget(budget.bytes, layer, reason is None, tuple(fallbacks), reason or "")


def fits(record: Record, budget: Budget) -> Probe:
    """A probe from a measured cell: ok within budget fits; oom never does; an ok cell without
    any of the budget's metrics is NO_PEAK (undecided, never "does not fit")."""
    batch = record.cell.batch_size
    if record.status != "ok":
        return Probe(batch, record.status, None, False, record.reason[:300])
    layer = next((m for m in budget.layers if m in record.metrics), None)
    if layer is None:
        reason = f"{record.cell.framework} emitted none of {', '.join(budget.layers)}"
        return Probe(batch, NO_PEAK, None, False, reason)
    peak = record.metrics[layer]
    return Probe(batch, "ok", peak, peak <= budget.bytes, "", layer)


class _Undecided(Exception):
    """A probe from which no fit can be decided: the search stops with its reason."""


def capacity(
    workload: str,
    framework: str,
    strategy: str,
    preset: str,
    budget: Budget,
    store: RecordStore,
    device_fraction: float | None = None,
    max_batch: int = MAX_BATCH,
    tolerance: float = 0,
    first: int = 1,
    engine: Engine | None = None,
) -> CapacityResult:
    """Search one combination; probes are kept in store (a rerun resumes)."""
    engine = engine or LocalEngine()
    knobs = registry.strategy(strategy)
    if knobs.allocator in registry.SWAPPING_ALLOCATORS and budget.enforced:
        return CapacityResult(
            workload, framework, strategy, preset, budget.bytes, budget.layer, True,
            budget.note, 0, None, "swaps",
            f"{knobs.allocator}: the framework moves memory to the host instead of failing, "
            "so no batch is out of memory: measure it as a cell (throughput), not as a fit",
            [],
        )  # fmt: skip
    budget = framework_budget(budget, framework, knobs)
    step = knobs.accumulate
    records: dict[int, Record] = {}
    tried: list[Probe] = []

    def probe(batch: int) -> Probe:
        cell = Cell(workload, framework, strategy, batch, preset)
        env = {DEVICE_BUDGET_ENV: f"{device_fraction:.6f}"} if device_fraction else {}
        with scoped_environ(env):
            record = engine.run([cell], store).records[0]
        records[batch] = record
        tried.append(result := fits(record, budget))
        if result.status == NO_PEAK:
            raise _Undecided(result.reason)
        return result

    try:
        search = bisect(probe, step, max_batch, tolerance, first)
    except _Undecided as exc:
        return CapacityResult(
            workload, framework, strategy, preset, budget.bytes, budget.layer, budget.enforced,
            budget.note, 0, None, "error",
            f"no fit can be decided: {exc} (the budget's metrics for {framework})",
            [asdict(p) for p in tried],
        )  # fmt: skip
    first = search.probes[0]
    status, reason = "ok", ""
    if search.largest_fit == 0 and first.status not in ("ok", "oom"):
        status, reason = first.status, first.reason  # unsupported, error: not a capacity
    best = records.get(search.largest_fit)
    points = [(p.batch_size, p.peak_bytes) for p in search.probes if p.peak_bytes is not None]
    fit = linear_fit(*zip(*points, strict=True)) if len(points) >= 2 else (None, None, None)
    return CapacityResult(
        workload, framework, strategy, preset, budget.bytes, budget.layer, budget.enforced,
        budget.note, search.largest_fit, search.smallest_non_fit, status, reason,
        [asdict(p) for p in search.probes],
        best.metrics.get("throughput_samples_per_second") if best else None, *fit,
    )  # fmt: skip


class scoped_environ:
    """Set environment variables for the duration of a block (the worker inherits them)."""

    def __init__(self, values: dict[str, str]):
        self.values, self.saved = values, {}

    def __enter__(self) -> None:
        for k, v in self.values.items():
            self.saved[k] = os.environ.get(k)
            os.environ[k] = v

    def __exit__(self, *exc: object) -> None:
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def search_in_parallel(
    combos: Sequence[tuple[str, str, str]],
    search: Callable[[str, str, str, Engine], CapacityResult],
    engine: Engine,
    path: Path,
    report: Callable[[int, CapacityResult], None],
) -> list[CapacityResult]:
    """Every combination's search at once, each in a thread whose probes are the engine's
    cells; results saved (in the combinations' order) as each search ends. An interrupt
    stops every search's cells."""
    done: dict[int, CapacityResult] = {}
    with terminate_as_interrupt(), ThreadPoolExecutor(max(1, len(combos))) as pool:
        futures = {pool.submit(search, *combo, engine): i for i, combo in enumerate(combos)}
        try:
            for future in as_completed(futures):
                done[futures[future]] = future.result()
                save_capacity_results([done[i] for i in sorted(done)], path)
                report(len(done), done[futures[future]])
        except BaseException:
            engine.stop()
            raise
    return [done[i] for i in sorted(done)]
