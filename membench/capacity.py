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

import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from membench import registry
from membench.backends import DEVICE_BUDGET_ENV
from membench.engines import Engine, LocalEngine, sigterm_as_interrupt
from membench.memory_model import linear_fit
from membench.records import Cell, Record, RecordStore

MAX_BATCH = 65_536


@dataclass
class Probe:
    batch_size: int
    status: str
    peak_bytes: float | None
    fits: bool
    reason: str = ""


@dataclass
class Search:
    """Where the boundary lies: every probe, the largest fit and the smallest non-fit."""

    probes: list[Probe] = field(default_factory=list)
    largest_fit: int = 0
    smallest_non_fit: int | None = None  # None: still fitting at the search's maximum


def bisect(
    probe: Callable[[int], Probe], step: int = 1, max_batch: int = MAX_BATCH, tolerance: float = 0
) -> Search:
    """Largest multiple of step for which probe(batch).fits, assuming fit is monotone; with
    a tolerance, bisection stops once the non-fit is within that fraction of the fit."""
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

    batch = step
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

    @property
    def note(self) -> str:
        if self.enforced:
            return "budget imposed through the framework's device-memory limit; OOM is real"
        return (
            f"CPU: no memory limit was imposed; a batch fits when its measured {self.layer} "
            "stays within the budget"
        )


def budget_for(device: str, budget_bytes: float) -> Budget:
    if device == "cuda":
        return Budget(budget_bytes, "peak_device_allocated_bytes", enforced=True)
    return Budget(budget_bytes, "peak_host_rss_bytes", enforced=False)


def fits(record: Record, budget: Budget) -> Probe:
    """A probe from a measured cell: ok within budget fits; oom never does."""
    peak = record.metrics.get(budget.layer) if record.status == "ok" else None
    ok = record.status == "ok" and peak is not None and peak <= budget.bytes
    return Probe(record.cell.batch_size, record.status, peak, ok, record.reason[:300])


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
    step = knobs.accumulate
    records: dict[int, Record] = {}

    def probe(batch: int) -> Probe:
        cell = Cell(workload, framework, strategy, batch, preset)
        env = {DEVICE_BUDGET_ENV: f"{device_fraction:.6f}"} if device_fraction else {}
        with scoped_environ(env):
            record = engine.run([cell], store).records[0]
        records[batch] = record
        return fits(record, budget)

    search = bisect(probe, step, max_batch, tolerance)
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
    with sigterm_as_interrupt(), ThreadPoolExecutor(max(1, len(combos))) as pool:
        futures = {pool.submit(search, *combo, engine): i for i, combo in enumerate(combos)}
        try:
            for future in as_completed(futures):
                done[futures[future]] = future.result()
                save_results([done[i] for i in sorted(done)], path)
                report(len(done), done[futures[future]])
        except BaseException:
            engine.stop()
            raise
    return [done[i] for i in sorted(done)]


def save_results(results: list[CapacityResult], path: Path) -> None:
    """All searches of a run in one JSON file, rewritten atomically after each search."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    os.chmod(tmp, 0o644)
    tmp.replace(path)


def load_results(path: Path) -> list[CapacityResult]:
    try:
        data = json.loads(path.read_text())
        return [CapacityResult(**item) for item in data]
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"{path}: not a capacity results file ({exc})") from None
