"""How a capacity search steps from probe to probe, and what fits a budget.

On a GPU the budget is imposed through the framework's own limit (each probe's worker is given
the budget as a membench.records.ProbeBudget, whose device share each backend turns into its
limit) and out-of-memory is real; a card's whole budget (capacity --whole-card) is NVML's
figure for the process, the framework's limit set below it by the process overhead the GPU
records measured, a batch fitting on that figure. On a CPU nothing fails, so the budget is
applied to the whole-life peak host RSS of the worker's processes (what a memory limit would
meet), and the result says so (Budget, fits).

Guided by the memory model, the first probe runs at the batch predicted to be the largest that
fits, each next one steps from the last probe's measured peak by the model's bytes per sample,
and the search ends once a fit and a non-fit lie one step apart (guided). Without a model,
plain bisection: double the batch until a probe does not fit, then bisect (bisect). Both
search in multiples of the micro-batch count for accumulation, and both can stop at a chosen
relative tolerance (probes are slow).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from membench import registry
from membench.fitting import linear_fit
from membench.instruments.probes import PROCESS as PROCESS_OWN  # NVML read the worker's PID
from membench.metrics import (
    BUSY_METRIC,
    LIFE_METRIC,
    PEAK_DEVICE_ALLOCATED_BYTES,
    PEAK_DEVICE_PROCESS_BYTES,
    STEADY_METRIC,
    readings,
    steady_beside,
)
from membench.records import (
    Record,
)

MAX_BATCH = 65_536


@dataclass
class Probe:
    batch_size: int
    status: str
    peak_bytes: float | None
    fits: bool
    reason: str = ""
    layer: str = ""  # the metric peak_bytes was read from
    repeat: int = 1  # which measurement of this batch (the boundary's are repeated)
    steady_peak_bytes: float | None = None  # the measured steps' own peak (host)
    foreign_cpu_share: float | None = None


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


def guided(
    probe: Callable[[int], Probe],
    budget_bytes: float,
    predicted: int,
    bytes_per_sample: float,
    step: int = 1,
    max_batch: int = MAX_BATCH,
    tolerance: float = 0,
    fixed_bytes: float | None = None,
) -> Search:
    """Largest multiple of step for which probe(batch).fits (fit assumed monotone), starting at
    the model's predicted batch. Each next probe moves from the last one by what its measured
    peak leaves of the budget, divided by the best slope at hand (slope_of), never further
    than bisection would, and strictly inside the bracket of the largest fit and the smallest
    non-fit; three moves the same way double the next step (_next_batch)."""
    search = Search()
    low, high = 0, None  # largest fit, smallest non-fit
    top = max_batch // step * step
    batch = min(max(step, predicted // step * step), top)
    streak, direction = 0, None
    while True:
        result = probe(batch)
        search.probes.append(result)
        if result.fits:
            low = batch
        else:
            high = batch
        if result.status == "unsupported":  # refused at any batch: no batch runs
            break
        if high is None and low + step > max_batch:
            break
        if high is not None and high - low <= max(step, int(low * tolerance)):
            break
        streak = streak + 1 if direction == result.fits else 1
        direction = result.fits
        slope = slope_of(search.probes, step, bytes_per_sample, fixed_bytes)
        batch = _next_batch(result, budget_bytes, slope, step, low, high, streak, top)
    search.largest_fit, search.smallest_non_fit = low, high
    return search


def slope_of(
    probes: Sequence[Probe], step: int, model_slope: float, fixed_bytes: float | None
) -> float:
    """Bytes per sample for the next move: the probes' own, where their peaks span enough
    samples; else the line from the model's fixed part (runtime and model state, which the
    calibration measures) through the one measured peak, since a strategy's error is mostly in
    its per-sample part; else the model's slope."""
    measured = [p for p in probes if p.peak_bytes is not None]
    if (found := measured_slope(measured, step)) is not None:
        return found
    if measured and fixed_bytes is not None:
        last = measured[-1]
        through = (last.peak_bytes - fixed_bytes) / last.batch_size
        if through > 0:
            return through
    return model_slope


def measured_slope(probes: Sequence[Probe], step: int) -> float | None:
    """Bytes per sample over the measured peaks, where they span at least two steps and an
    eighth of the largest batch (closer ones differ by little more than the peaks' noise)."""
    points = [(p.batch_size, p.peak_bytes) for p in probes if p.peak_bytes is not None]
    batches = [b for b, _ in points]
    if len(points) < 2 or max(batches) - min(batches) < max(2 * step, max(batches) / 8):
        return None
    slope = linear_fit(*zip(*points, strict=True))[1]
    return slope if slope and slope > 0 else None


def _next_batch(
    last: Probe, budget: float, per_sample: float, step: int, low: int, high: int | None,
    streak: int, top: int,
) -> int:  # fmt: skip
    """The guided search's next batch: the slope's step from the last measured peak, no
    further than halfway to the bracket's other end (or double, upwards, before a non-fit), at
    least one step into the open bracket. After three same-way moves the step doubles (at least
    two steps), so a search creeping along a curved or noisy peak brackets the boundary instead
    of falling back to bisection from the first step, which cost up to 9 probes."""
    upper = (high - step) if high is not None else top
    if last.peak_bytes is not None and per_sample > 0:
        move = math.floor((budget - last.peak_bytes) / per_sample)
        if streak >= 3:  # creeping (a curved or noisy peak): overshoot to close the bracket
            move = 2 * move or (2 * step if last.fits else -2 * step)
        guess = last.batch_size + move
    elif streak >= 3:
        guess = 2 * low if high is None else (low + high) // 2
    else:  # no peak (a real out-of-memory): halfway down, or doubling up
        guess = (low + high) // 2 if high is not None else 2 * max(low, step)
    if last.fits:
        guess = min(guess, (last.batch_size + high) // 2 if high else 2 * last.batch_size)
    else:
        guess = max(guess, (low + last.batch_size) // 2)
    guess = guess // step * step
    return max(low + step, min(guess, upper))


def bisection_probes(
    largest_fit: int, smallest_non_fit: int | None, step: int = 1, max_batch: int = MAX_BATCH
) -> int:
    """How many probes plain bisection from the first step would take to reach the same
    boundary (each probe answered by it: fit is monotone)."""
    limit = largest_fit if smallest_non_fit is not None else max_batch
    search = bisect(lambda b: Probe(b, "ok", None, b <= limit), step, max_batch)
    return len(search.probes)


@dataclass
class Budget:
    bytes: float
    layer: str  # the metric the budget applies to
    enforced: bool  # True where the framework's limit makes exceeding it fail (GPU)
    fallbacks: tuple[str, ...] = ()  # metrics read where a probe lacks `layer`
    unenforced: str = ""  # why a device budget binds no allocation (the framework's own cause)
    # a card's whole budget (layer: NVML's process figure): the process overhead the GPU
    # records measured per framework, (framework, bytes, of what it is the median), and the
    # framework's allocator limit this one's sets, the budget less its overhead
    overheads: tuple[tuple[str, float, str], ...] = ()
    allocator_bytes: float | None = None

    @property
    def layers(self) -> tuple[str, ...]:
        return (self.layer, *self.fallbacks)

    @property
    def whole_card(self) -> bool:
        """The budget is the process's whole figure, as a card's memory is."""
        return self.layer == PEAK_DEVICE_PROCESS_BYTES

    @property
    def limit(self) -> float:
        """What the framework's allocator is limited to: the budget, or on a card's whole
        budget the budget less the process overhead."""
        return self.bytes if self.allocator_bytes is None else self.allocator_bytes

    @property
    def note(self) -> str:
        if self.whole_card and self.enforced:
            how = next((h for _, _, h in self.overheads), "")
            return (
                "a card's whole budget: a batch fits when NVML's figure for the process stays "
                f"within it; the framework's limit set to {self.limit / 2**20:,.0f} MiB, the "
                f"budget less the process overhead the GPU records measured ({how}); OOM is real"
            )
        if self.enforced:
            return "budget imposed through the framework's device-memory limit; OOM is real"
        measured = " (else ".join(self.layers) + ")" * len(self.fallbacks)
        where = self.unenforced or "CPU: no memory limit was imposed"
        return f"{where}; a batch fits when its measured {measured} stays within the budget"


def budget_for(
    device: str, budget_bytes: float, overheads: tuple[tuple[str, float, str], ...] = ()
) -> Budget:
    """A GPU's budget is the framework's own limit, or with overheads (framework, bytes, how)
    a card's whole budget: NVML's process figure, the framework's limit set below it by its
    measured overhead; a host's is what a memory limit on the worker's processes would meet
    over their whole life (start-up, build, the first step's compilation, forked
    compilers), not the measured steps' peak alone."""
    if device == "cuda" and overheads:
        return Budget(budget_bytes, PEAK_DEVICE_PROCESS_BYTES, True, overheads=overheads)
    if device == "cuda":
        return Budget(budget_bytes, PEAK_DEVICE_ALLOCATED_BYTES, enforced=True)
    return Budget(budget_bytes, LIFE_METRIC, enforced=False)


def framework_budget(budget: Budget, framework: str, knobs: registry.Strategy) -> Budget:
    """A device budget as one framework keeps it: on its own peak metrics, and enforced only
    where its limit binds (host budgets read peak host RSS, which every framework has)."""
    if not budget.enforced:
        return budget
    backend = type(registry.load_backend(framework))
    reason = backend.unenforced_device_limit(knobs)
    if budget.whole_card:  # on NVML's figure; the limit below it by this framework's overhead
        mine = tuple(o for o in budget.overheads if o[0] == framework)
        if not mine:  # a result read again: its budget as it was searched
            return budget
        return replace(
            budget, enforced=reason is None, unenforced=reason or "", overheads=mine,
            allocator_bytes=budget.bytes - mine[0][1],
        )  # fmt: skip
    layer, *fallbacks = readings(framework).device_peaks
    return Budget(budget.bytes, layer, reason is None, tuple(fallbacks), reason or "")


def fits(record: Record, budget: Budget, repeat: int = 1) -> Probe:
    """A probe from a measured cell (the batch's repeat-th measurement): ok within budget
    fits; oom never does; an ok cell without any of the budget's metrics is NO_PEAK
    (undecided, never "does not fit")."""
    batch = record.cell.batch_size
    if record.status != "ok":
        return Probe(batch, record.status, None, False, record.reason[:300], repeat=repeat)
    layer = next((m for m in budget.layers if m in record.metrics), None)
    if layer is None:
        reason = f"{record.cell.framework} emitted none of {', '.join(budget.layers)}"
        return Probe(batch, NO_PEAK, None, False, reason, repeat=repeat)
    if budget.whole_card and record.environment.get("nvml_method", PROCESS_OWN) != PROCESS_OWN:
        reason = (
            f"NVML's figure is the device's less a baseline ({record.environment['nvml_method']}), "
            "not the process's own: a card's whole budget cannot be judged on it"
        )
        return Probe(batch, NO_PEAK, None, False, reason, repeat=repeat)
    peak = record.metrics[layer]
    steady = record.metrics.get(STEADY_METRIC) if steady_beside(layer) else None
    share = record.metrics.get(BUSY_METRIC)
    return Probe(batch, "ok", peak, peak <= budget.bytes, "", layer, repeat, steady, share)
