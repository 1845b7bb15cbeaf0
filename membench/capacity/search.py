"""Capacity: the largest batch whose step runs within a memory budget.

Each probe is an ordinary cell measured in a fresh worker process at one batch size. With
repeats, the answer and the next batch are measured several times: the answer fits only if
every repeat does, with the boundary's spread (the larger max - min of the two batches'
repeats) to spare. This module runs a search (capacity: its first guess from
membench.capacity.first_guess, its steps from membench.capacity.search_steps, the probes and
their repeats, the answer's samples/s), reads a stored search again (reread), and runs the
searches of different combinations at once with a parallel engine (ray); each stays
sequential. Framework-free.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, replace
from pathlib import Path

from membench import paths, registry
from membench.capacity.first_guess import model_fields, model_guess, search_guess
from membench.capacity.search_steps import (
    MAX_BATCH,
    NO_PEAK,
    Budget,
    Probe,
    Search,
    bisect,
    bisection_probes,
    fits,
    framework_budget,
    guided,
)
from membench.cells.compile_cache import warm_cache, warm_up_store
from membench.cells.engines import Engine, LocalEngine
from membench.cells.supervision import RunControl, RunResult
from membench.cells.termination import terminate_as_interrupt
from membench.cells.worker_launch import DEFAULT_OPTIONS, WorkerOptions
from membench.fitting import linear_fit
from membench.metrics import (
    BUSY_METRIC,
    THROUGHPUT,
    measured_alone,
    quiet_speeds,
    readings,
    share_behind_speed,
)
from membench.records import (
    CapacityResult,
    Cell,
    ProbeBudget,
    Record,
    RecordStore,
    save_capacity_results,
)


class _Undecided(Exception):
    """A probe from which no fit can be decided: the search stops with its reason."""


def capacity(
    workload: str,
    framework: str,
    strategy: str,
    preset: str,
    budget: Budget,
    store: RecordStore,
    device_bytes: int | None = None,
    max_batch: int = MAX_BATCH,
    tolerance: float = 0,
    first: int = 1,
    engine: Engine | None = None,
    machine: str = "",
    guide: bool = True,
    repeats: int = 1,
    options: WorkerOptions = DEFAULT_OPTIONS,
    progress: Callable[[str], None] | None = None,
) -> CapacityResult:
    """Search one combination; probes are kept in store (a rerun resumes). Guided by the
    memory model where the workload has one and guide is set, else plain bisection from
    first. With repeats > 1 the answer and the next batch are measured that many times each
    (the repeats in stores beside store): the answer fits only if every repeat does. Each
    probe's worker is launched with the run's options and the budget (on a GPU of device_bytes,
    its share imposed by the framework: ProbeBudget); progress, if
    given, is told each probe's outcome as it ends (probe_line)."""
    engine = engine or LocalEngine()
    knobs = registry.strategy(strategy)
    if knobs.allocator in registry.SWAPPING_ALLOCATORS and budget.enforced:
        return CapacityResult(
            workload, framework, strategy, preset, budget.bytes, budget.layer, True,
            budget.note, 0, None, "swaps",
            f"{knobs.allocator}: the framework moves memory to the host instead of failing, "
            "so no batch is out of memory: measure it as a cell (throughput), not as a fit",
            [], **model_fields(workload, framework, strategy, preset, budget, machine),
        )  # fmt: skip
    budget = framework_budget(budget, framework, knobs)
    model = model_fields(workload, framework, strategy, preset, budget, machine)
    step = knobs.accumulate
    records: dict[tuple[int, int], Record] = {}
    tried: list[Probe] = []
    probe_budget = ProbeBudget(round(budget.limit), device_bytes)
    control = RunControl(worker=replace(options, budget=probe_budget))

    def run_cell(batch: int, where: RecordStore) -> RunResult:
        return engine.run([Cell(workload, framework, strategy, batch, preset)], where, control)

    def probe(batch: int, repeat: int = 1) -> Probe:
        where = store if repeat == 1 else repeat_store(store, repeat)
        ran = run_cell(batch, where)
        records[batch, repeat] = record = ran.records[0]
        result = fits(record, budget, repeat)
        tried.append(result)
        if progress is not None:  # a probe met again, or of a resumed run, comes from the store
            progress(probe_line(result, budget.bytes) + (" (stored)" if ran.reused else ""))
        if result.status == NO_PEAK:
            raise _Undecided(result.reason)
        return result

    cache = warm_cache(
        framework, strategy, step, lambda b: run_cell(b, warm_up_store(store)).records[0]
    )
    if guide:
        kept = paths.guess_file(store.root, workload, framework, strategy)
        guess = search_guess(
            workload, framework, strategy, preset, budget, machine, max_batch, kept
        )
    else:  # bisection does not use a guess: the model's is kept as its prediction, at no cost
        guess = model_guess(workload, framework, strategy, preset, budget, machine, max_batch)

    def search_below(top: int) -> Search:
        if guide and guess is not None:
            return guided(
                probe, budget.bytes, min(guess.batch, top), guess.bytes_per_sample, step, top,
                tolerance, guess.fixed_bytes,
            )  # fmt: skip
        # below an answer a repeat put over the budget, bisection starts at the new top: its
        # doubling from `first` would stop short of it
        return bisect(probe, step, top, tolerance, top if top < max_batch else first)

    try:
        search = search_below(max_batch)
        if repeats > 1 and search.probes[0].status != "unsupported":
            search = confirmed(search, probe, repeats, step, search_below, budget.bytes)
    except _Undecided as exc:
        return CapacityResult(
            workload, framework, strategy, preset, budget.bytes, budget.layer, budget.enforced,
            budget.note, 0, None, "error",
            f"no fit can be decided: {exc} (the budget's metrics for {framework})",
            [asdict(p) for p in tried], compile_cache=cache, **model,
        )  # fmt: skip
    probes = distinct(search.probes)
    first_probe = probes[0]
    status, reason = "ok", ""
    if search.largest_fit == 0 and first_probe.status not in ("ok", "oom"):
        status, reason = first_probe.status, first_probe.reason  # unsupported, error
    plain = None
    if status == "ok" and search.largest_fit:
        plain = bisection_probes(search.largest_fit, search.smallest_non_fit, step, max_batch)
    at_fit = [r for (b, _), r in sorted(records.items()) if b == search.largest_fit]
    speed, share = answer_speed(at_fit)
    steady = [p.steady_peak_bytes for p in probes if p.batch_size == search.largest_fit]
    return CapacityResult(
        workload, framework, strategy, preset, budget.bytes, budget.layer, budget.enforced,
        budget.note, search.largest_fit, search.smallest_non_fit, status, reason,
        [asdict(p) for p in probes], speed,
        predicted_batch=guess.batch if guess else None,
        prediction_basis=guess.basis if guess else "",
        prediction_measured_batches=list(guess.measured_batches) if guess else [],
        search="guided" if guide and guess is not None else "bisection",
        bisection_probes=plain, repeats=repeats, noise_room=repeats > 1,
        foreign_cpu_share_at_fit=share,
        steady_peak_at_fit_bytes=max((v for v in steady if v is not None), default=None),
        compile_cache=cache,
        **limit_margin(budget, framework, at_fit),
        **model,
        **peak_summary(probes, budget.bytes, search.largest_fit, search.smallest_non_fit),
    )  # fmt: skip


def limit_margin(budget: Budget, framework: str, at_fit: Sequence[Record]) -> dict[str, object]:
    """On a card's whole budget, the framework's limit and the answer's room below it (the
    limit less the highest of its allocator peaks at the answer): the margin against what
    was enforced, beside the one against the card."""
    if not budget.whole_card or budget.allocator_bytes is None:
        return {}
    layer = readings(framework).device_peaks[0]
    peaks = [r.metrics[layer] for r in at_fit if r.status == "ok" and layer in r.metrics]
    return {
        "limit_bytes": budget.limit,
        "limit_margin_bytes": budget.limit - max(peaks) if peaks else None,
    }


def peak_summary(
    probes: Sequence[Probe], budget: float, fit: int, non_fit: int | None
) -> dict[str, object]:
    """What a search's probe peaks say: the line through them (fixed + per-sample cost) and
    the boundary against its noise."""
    points = [(p.batch_size, p.peak_bytes) for p in probes if p.peak_bytes is not None]
    line = linear_fit(*zip(*points, strict=True)) if len(points) >= 2 else (None, None, None)
    return {
        **dict(zip(("fit_fixed_bytes", "fit_per_sample_bytes", "fit_r2"), line, strict=True)),
        **boundary(probes, budget, fit, non_fit),
    }


def reread(result: CapacityResult, probes_root: Path) -> CapacityResult:
    """A settled device search's peaks read again from its stored records on the layer its
    framework's limit binds (framework_budget): its probes, their verdicts and its answer stay
    the search's own (out-of-memory decided them); the peaks, the fitted line and the margins
    follow the layer. Refused (ValueError) where a probe's record is missing, its verdict would
    change or the answer would lose the noise rule's room: then only the search can say."""
    budget = framework_budget(
        Budget(result.budget_bytes, result.budget_layer, result.budget_enforced),
        result.framework, registry.strategy(result.strategy),
    )  # fmt: skip
    if not budget.enforced or result.status != "ok" or budget.layer == result.budget_layer:
        return result
    store = RecordStore(probes_root)
    probes = []
    for old in result.probes:
        batch, repeat = old["batch_size"], old.get("repeat", 1)
        cell = Cell(result.workload, result.framework, result.strategy, batch, result.preset)
        record = (store if repeat == 1 else repeat_store(store, repeat)).get(cell)
        if record is None:
            raise ValueError(f"{cell.key} (run {repeat}): no stored record")
        probe = fits(record, budget, repeat)
        if probe.fits != old["fits"]:
            raise ValueError(f"{cell.key} (run {repeat}): fits on {budget.layer} would change")
        probes.append(probe)
    found = peak_summary(probes, budget.bytes, result.largest_fit, result.smallest_non_fit)
    if result.noise_room and not clears_noise(found):
        raise ValueError(f"{result.largest_fit}: its margin on {budget.layer} is within noise")
    return replace(result, budget_layer=budget.layer, probes=[asdict(p) for p in probes], **found)


def probe_line(probe: Probe, budget_bytes: float) -> str:
    """One probe's outcome for a long search's log: its batch and run, its peak against the
    budget, or why it has none."""
    run = f", run {probe.repeat}" if probe.repeat > 1 else ""
    where = f"batch {probe.batch_size}{run}"
    if probe.peak_bytes is None:
        return f"{where}: {probe.status}{f' ({probe.reason[:100]})' if probe.reason else ''}"
    room = (budget_bytes - probe.peak_bytes) / 2**20
    verdict = f"fits, {room:,.0f} MiB to spare" if probe.fits else f"over by {-room:,.0f} MiB"
    return f"{where}: {probe.peak_bytes / 2**20:,.0f} MiB, {verdict}"


def repeat_store(store: RecordStore, repeat: int) -> RecordStore:
    """Where a boundary's k-th measurement is kept: beside the probes' store, so that the
    probes' folder holds one record per batch."""
    return RecordStore(paths.repeat_probes(store.root, repeat))


def confirmed(
    search: Search, probe: Callable[[int, int], Probe], repeats: int, step: int,
    below: Callable[[int], Search], budget_bytes: float,
) -> Search:  # fmt: skip
    """The boundary measured against its noise: the answer measured `repeats` times, then the
    next batch as often (one non-fit already makes it no fit). The answer stands only where
    every repeat fits with the boundary's spread to spare (budget less its highest peak at
    least the larger max - min of the two batches' repeats: has_room); else it is no fit and
    the search goes on below it, whose next batch is then the one just measured."""
    while search.largest_fit:
        low = search.largest_fit
        again = [probe(low, k) for k in range(2, repeats + 1)]
        search.probes += again
        if all(p.fits for p in again):
            search.probes += next_batch_repeats(search, probe, repeats)
            if has_room(search, budget_bytes):
                break
        search.smallest_non_fit = low
        if low - step < step:
            search.largest_fit = 0
            break
        lower = below(low - step)
        search.probes += lower.probes
        search.largest_fit = lower.largest_fit
        if lower.smallest_non_fit is not None:
            search.smallest_non_fit = min(low, lower.smallest_non_fit)
    search.probes += next_batch_repeats(search, probe, repeats)
    return search


def next_batch_repeats(
    search: Search, probe: Callable[[int, int], Probe], repeats: int
) -> list[Probe]:
    """The next batch's repeats not yet measured: worth measuring only where its first
    measurement gave a peak (not a timeout); its spread is the margin's noise."""
    high = search.smallest_non_fit
    first = next((p for p in search.probes if p.batch_size == high and p.repeat == 1), None)
    if high is None or first is None or first.peak_bytes is None:
        return []
    done = {(p.batch_size, p.repeat) for p in search.probes}
    return [probe(high, k) for k in range(2, repeats + 1) if (high, k) not in done]


def has_room(search: Search, budget_bytes: float) -> bool:
    """Whether the answer's margin is at least the boundary's spread (without repeats there
    is no spread: room enough)."""
    return clears_noise(boundary(distinct(search.probes), budget_bytes, search.largest_fit,
                                 search.smallest_non_fit))  # fmt: skip


def clears_noise(found: dict[str, object]) -> bool:
    """Whether boundary()'s margin is at least its spread (no repeats, no spread: room)."""
    margin, spread = found["margin_bytes"], found["spread_bytes"]
    return margin is not None and (spread is None or margin >= spread)


def distinct(probes: Sequence[Probe]) -> list[Probe]:
    """Each measurement once (a search below an answer meets stored probes again)."""
    seen: dict[tuple[int, int], Probe] = {}
    for p in probes:
        seen.setdefault((p.batch_size, p.repeat), p)
    return list(seen.values())


def boundary(
    probes: Sequence[Probe], budget: float, fit: int, non_fit: int | None
) -> dict[str, object]:
    """The answer's margin and the next batch's excess, with the repeats' spread."""
    at_fit = [p.peak_bytes for p in probes if p.batch_size == fit and p.peak_bytes is not None]
    over = [p.peak_bytes for p in probes if p.batch_size == non_fit and p.peak_bytes is not None]
    spreads = [max(v) - min(v) for v in (at_fit, over) if len(v) >= 2]
    return {
        "fit_peaks_bytes": at_fit,
        "non_fit_peaks_bytes": over,
        "margin_bytes": budget - max(at_fit) if fit and at_fit else None,
        "over_bytes": sum(over) / len(over) - budget if over else None,
        "spread_bytes": max(spreads, default=None),
    }


def answer_speed(records: Sequence[Record]) -> tuple[float | None, float | None]:
    """The answer's samples/s (the median over its quiet repeats measured alone) and the
    foreign CPU share behind it; no speed where every repeat ran on a busy host (the share
    then the least) or side by side with other probes."""
    ok = [r for r in records if r.status == "ok" and THROUGHPUT in r.metrics
          and measured_alone(r.environment)]  # fmt: skip
    quiet = quiet_speeds(r.metrics for r in ok)
    share = share_behind_speed(r.metrics[BUSY_METRIC] for r in ok if BUSY_METRIC in r.metrics)
    return (statistics.median(quiet) if quiet else None), share


def search_in_parallel(
    combos: Sequence[tuple[str, str, str]],
    search: Callable[[str, str, str, Engine], CapacityResult],
    engine: Engine,
    path: Path,
    report: Callable[[int, CapacityResult], None],
    kept: Sequence[CapacityResult] = (),
    at_once: int | None = None,
) -> list[CapacityResult]:
    """The combinations' searches, at_once of them at a time (default: all), each in a thread
    whose probes are the engine's cells; results saved (after those kept from an earlier run,
    then in the combinations' order) as each search ends. An interrupt stops every search's
    cells."""
    done: dict[int, CapacityResult] = {}
    threads = max(1, min(at_once or len(combos), len(combos)))
    with terminate_as_interrupt(), ThreadPoolExecutor(threads) as pool:
        futures = {pool.submit(search, *combo, engine): i for i, combo in enumerate(combos)}
        try:
            for future in as_completed(futures):
                done[futures[future]] = future.result()
                save_capacity_results([*kept, *(done[i] for i in sorted(done))], path)
                report(len(done), done[futures[future]])
        except BaseException:
            engine.stop()
            raise
    return [done[i] for i in sorted(done)]
