"""Capacity: the largest batch whose step runs within a memory budget.

Each probe is an ordinary cell measured in a fresh worker process at one batch size. On a GPU
the budget is imposed through the framework's own limit (each probe's worker is given the
budget as a membench.records.ProbeBudget, whose device share each backend turns into its
limit) and out-of-memory is real; on a CPU nothing fails,
so the budget is applied to the whole-life peak host RSS of the worker's processes (what a
memory limit would meet), and the result says so. With repeats, the answer and the next batch
are measured several times: the answer fits only if every repeat does, with the boundary's
spread (the larger max - min of the two batches' repeats) to spare.

The search is guided by the memory model (membench.memory.memory_model, with this machine's
calibrated constants where they exist; on a host, the framework's compiler where it offers a
prediction: membench.capacity.compiled_guess): the first probe runs at the batch predicted to
be the largest that fits, each next one steps from the last probe's measured peak by the
model's bytes per sample, and the search ends once a fit and a non-fit lie one step apart.
Without a model (a workload without one), plain bisection: double the batch until a probe does
not fit, then bisect. Both search in multiples of the micro-batch count for accumulation, and
both can stop at a chosen relative tolerance (probes are slow). Framework-free. With a parallel
engine (ray), the searches of different combinations run at once; each stays sequential.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from membench import file_rules, paths, registry
from membench.capacity.compiled_guess import (
    CompiledGuessFailed,
    compiled_guess,
    compiled_memory_module,
)
from membench.cells.compile_cache import warm_cache, warm_up_store
from membench.cells.engines import Engine, LocalEngine
from membench.cells.supervision import (
    DEFAULT_OPTIONS,
    RunControl,
    RunResult,
    WorkerOptions,
    terminate_as_interrupt,
)
from membench.fitting import linear_fit
from membench.memory import calibration
from membench.memory.calibration import MODE_REFERENCE, Calibration, Fit
from membench.memory.memory_model import MEASURED, SPEC_ONLY, Constants, predict
from membench.metrics import (
    BUSY_METRIC,
    LIFE_METRIC,
    PEAK_DEVICE_ALLOCATED_BYTES,
    STEADY_METRIC,
    THROUGHPUT,
    quiet_speeds,
    readings,
    share_behind_speed,
    steady_beside,
)
from membench.records import (
    CapacityResult,
    Cell,
    ProbeBudget,
    Record,
    RecordStore,
    save_capacity_results,
    write_json_atomic,
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
    """A GPU's budget is the framework's own limit; a host's is what a memory limit on the
    worker's processes would meet over their whole life (start-up, build, the first step's
    compilation, forked compilers), not the measured steps' peak alone."""
    if device == "cuda":
        return Budget(budget_bytes, PEAK_DEVICE_ALLOCATED_BYTES, enforced=True)
    return Budget(budget_bytes, LIFE_METRIC, enforced=False)


def framework_budget(budget: Budget, framework: str, knobs: registry.Strategy) -> Budget:
    """A device budget as one framework keeps it: on its own peak metrics, and enforced only
    where its limit binds (host budgets read peak host RSS, which every framework has)."""
    if not budget.enforced:
        return budget
    backend = type(registry.load_backend(framework))
    layer, *fallbacks = readings(framework).device_peaks
    reason = backend.unenforced_device_limit(knobs)
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
    peak = record.metrics[layer]
    steady = record.metrics.get(STEADY_METRIC) if steady_beside(layer) else None
    share = record.metrics.get(BUSY_METRIC)
    return Probe(batch, "ok", peak, peak <= budget.bytes, "", layer, repeat, steady, share)


@dataclass(frozen=True)
class Guess:
    """The memory model's largest batch within a budget, and the slope the search steps by."""

    batch: int  # 0: not even one step fits, by the model
    bytes_per_sample: float
    # "calibrated (<framework> <version>)", "calibrated on <host kind> (...)" (another host
    # kind's constants), either ending ", <strategy>'s constants)" where another strategy's
    # fit stood in (calibration_basis), "spec-only" or the compiler's
    basis: str
    fixed_bytes: float = 0.0  # the predicted peak less its per-sample part
    # batches measured to make the guess (the compiler's first-run extra; the calibration
    # cells behind the model's constants): a search whose answer or next batch is one of
    # them is left out of the guess's error (a prediction never scored against its own input)
    measured_batches: tuple[int, ...] = ()


def calibrated_layer(layer: str) -> str:
    """The metric a calibration of the budget's layer was measured on: a host budget's
    whole-life peak by a host calibration (fitted on the whole-life peaks of its cells too:
    budget_fit)."""
    return STEADY_METRIC if layer == LIFE_METRIC else layer


def budget_fit(cal: Calibration, workload: str, strategy: str, layer: str) -> Fit | None:
    """The calibration's fit for the budget's layer: its fit of that layer where it has one,
    else its fit of the layer it measured (a host calibration stored before it fitted the
    whole-life peak)."""
    return cal.fit(workload, strategy, layer) or cal.fit(workload, strategy)


def calibration_for(
    machine: str, framework: str, layer: str, workload: str, strategy: str,
    calibrations: Mapping[tuple[str, str, str], Calibration] | None = None,
    version: str | None = None,
) -> Calibration | None:  # fmt: skip
    """The framework's calibration of the workload's strategy (its own fit, else its mode's:
    Calibration.fit) for the budget's layer, measured at the calibrate preset's batches (an
    older protocol's fit is not used: the U-Net's at 1 and 3 was noise): this machine's where
    it has one, else, on a host, another host kind's (a framework's memory on a host differs
    little between CPU models: intel-xeon's constants guessed ba136c8's torch answers on
    amd-epyc-f26m2 with a 25% median error, the spec alone with 144%); of those, the installed
    version's (or the given version's) where it is known and stored, else the newest.
    calibrations: the stored ones (calibration.load_all) unless given."""
    stored = calibration.load_all() if calibrations is None else calibrations
    found = [
        c for (_, f, _), c in stored.items()
        if f == framework and MEASURED[c.device_kind] == calibrated_layer(layer)
        and current_protocol(c, workload, strategy)
    ]  # fmt: skip
    here = [c for c in found if c.machine == machine]
    found = here or [c for c in found if c.device_kind == "cpu"]
    wanted = version or installed_version(framework)
    exact = [c for c in found if c.framework_version == wanted]
    return max(exact or found, key=lambda c: c.created_at, default=None)


def current_protocol(cal: Calibration, workload: str, strategy: str) -> bool:
    """Whether the fit the calibration holds for the workload's strategy was measured at the
    calibrate preset's inputs and batches for the strategy whose fit it is (ResNet-50's fits
    at 128x128 do not carry to the searches' 224x224)."""
    fit = cal.fit(workload, strategy)
    sizes = registry.preset(registry.CALIBRATION_PRESET).sizes
    if fit is None or workload not in sizes:
        return False
    wanted = registry.calibration_batches(workload, fit.strategy)
    inputs = dict(sizes[workload].inputs)
    return sorted({p.batch_size for p in fit.points}) == sorted(wanted) and all(
        p.inputs == inputs for p in fit.points
    )


def calibration_basis(cal: Calibration, machine: str, workload: str, strategy: str) -> str:
    """The guess's basis as records and tables name it: whose calibration it used, and the
    strategy whose fit stood in where the strategy has none of its own."""
    where = "" if cal.machine == machine else f" on {cal.machine}"
    fit = cal.fit(workload, strategy)
    source = (fit.strategy or MODE_REFERENCE[fit.mode]) if fit else strategy
    borrowed = f", {source}'s constants" if source != strategy else ""
    return f"calibrated{where} ({cal.framework} {cal.framework_version}{borrowed})"


def installed_version(framework: str) -> str | None:
    """The framework distribution's version in this interpreter, without importing it."""
    try:
        return metadata.version(registry.framework(framework).distribution)
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class Ran:
    """What a stored search ran, from its records (a guess made again later uses them, not
    today's preset sizes nor the installed framework version)."""

    inputs: dict[str, int]
    framework_version: str


def model_guess(
    workload: str, framework: str, strategy: str, preset: str, budget: Budget, machine: str,
    max_batch: int = MAX_BATCH,
    calibrations: Mapping[tuple[str, str, str], Calibration] | None = None,
    ran: Ran | None = None,
) -> Guess | None:  # fmt: skip
    """The largest multiple of the strategy's micro-batch count whose predicted peak stays
    within the budget (the model is linear in the batch), or None where the workload has no
    memory model. Calibrated constants where this machine (else another host kind) has them
    for the workload's strategy on the budget's layer; nothing measured by this search enters
    it. ran: a stored search's inputs and framework version (default: the preset's and the
    installed one)."""
    knobs = registry.strategy(strategy)
    inputs = ran.inputs if ran else registry.preset(preset).size(workload).inputs
    world = registry.world_size_of(knobs, registry.preset(preset))
    version = ran.framework_version if ran else None
    cal = calibration_for(
        machine, framework, budget.layer, workload, strategy, calibrations, version
    )
    fit = budget_fit(cal, workload, strategy, budget.layer) if cal else None
    constants = fit.constants if fit else None
    basis = calibration_basis(cal, machine, workload, strategy) if constants else "spec-only"
    # the cells measured for this very guess: the strategy's own fit, on this machine (a fit
    # standing in, the reference strategy's or another host kind's, measured other cells)
    own = fit is not None and fit.strategy == strategy and cal.machine == machine
    measured = tuple(sorted({p.batch_size for p in fit.points})) if own else ()
    if constants and constants.activation_factor <= 0:
        # a two-point fit on the noise of tiny batches (the U-Net's inference on CPU): a slope
        # that says nothing, so the spec's activations stand in for it (the runtime stays)
        constants = Constants(constants.runtime_bytes, SPEC_ONLY.activation_factor)
        basis += ", spec activations (calibrated factor not positive)"
    step = knobs.accumulate

    def peak(batch: int) -> float | None:
        found = predict(workload, knobs, batch, inputs, constants or SPEC_ONLY, world)
        return found.total if found is not None else None

    one, two = peak(step), peak(2 * step)
    if one is None or two is None:
        return None
    per_sample = (two - one) / step
    fixed = one - per_sample * step
    if one > budget.bytes or per_sample <= 0:
        return Guess(0, per_sample, basis, fixed, measured)
    batch = step + int((budget.bytes - one) // per_sample) // step * step
    return Guess(min(batch, max_batch // step * step), per_sample, basis, fixed, measured)


def model_fields(
    workload: str, framework: str, strategy: str, preset: str, budget: Budget, machine: str,
    calibrations: Mapping[tuple[str, str, str], Calibration] | None = None,
    ran: Ran | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A search's model_batch and model_basis: the model's guess, kept beside the answer even
    where the compiler's guided the search, and never capped by the search's largest batch
    (a capped guess would hide how far above the answer the model was)."""
    found = model_guess(
        workload, framework, strategy, preset, budget, machine, MAX_BATCH, calibrations, ran
    )
    return {
        "model_batch": found.batch if found else None,
        "model_basis": found.basis if found else "",
    }


def makes_compiled_guess(budget: Budget, framework: str) -> bool:
    """Whether a search's first guess comes from the framework's compiler: a whole-life host
    budget (what the compiled guess predicts) and a framework that offers one."""
    return budget.layer == LIFE_METRIC and compiled_memory_module(framework) is not None


def search_guess(
    workload: str, framework: str, strategy: str, preset: str, budget: Budget, machine: str,
    max_batch: int = MAX_BATCH, kept: Path | None = None,
) -> Guess | None:  # fmt: skip
    """The search's first guess: on a host budget (the whole-life peak), from the framework's
    own compiler where it offers one (JAX: the step compiled, not run, in processes of its
    own: membench.capacity.compiled_guess), else the memory model's (model_guess), which also stands
    in, with the reason, where the compiles fail. A compiled guess is kept in the file
    `kept` and read back from it for the same search (a resumed one compiles nothing)."""
    found = model_guess(workload, framework, strategy, preset, budget, machine, max_batch)
    if not makes_compiled_guess(budget, framework):
        return found
    question = {"budget_bytes": budget.bytes, "max_batch": max_batch}
    if kept is not None and (old := _kept_guess(kept, question)) is not None:
        return old
    step = registry.strategy(strategy).accumulate
    try:
        xla = compiled_guess(workload, framework, strategy, preset, budget.bytes, max_batch, step)
    except CompiledGuessFailed as exc:
        if found is None:
            return None
        why = f"{found.basis} (the compiled guess failed: {str(exc)[:200]})"
        return Guess(
            found.batch, found.bytes_per_sample, why, found.fixed_bytes, found.measured_batches
        )
    if xla is None:
        return found
    guess = Guess(xla.batch, xla.bytes_per_sample, xla.basis, xla.fixed_bytes, xla.measured_batches)
    if kept is not None:
        write_json_atomic(kept, {**question, "guess": asdict(guess)})  # no link followed
    return guess


def _kept_guess(path: Path, question: dict[str, float]) -> Guess | None:
    """A guess kept by an earlier run of the same search, or None (none, another question,
    or a file that cannot be read: the guess is then made again)."""
    try:
        data = file_rules.load_json(path)
        if {k: data[k] for k in question} != question:
            return None
        raw = data["guess"]
        return Guess(
            int(raw["batch"]), float(raw["bytes_per_sample"]), str(raw["basis"]),
            float(raw["fixed_bytes"]), tuple(int(b) for b in raw["measured_batches"]),
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None


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
    probe_budget = ProbeBudget(round(budget.bytes), device_bytes)
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
        **model,
        **peak_summary(probes, budget.bytes, search.largest_fit, search.smallest_non_fit),
    )  # fmt: skip


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
    """The answer's samples/s (the median over its quiet repeats) and the foreign CPU share
    behind it; no speed where every repeat ran on a busy host (the share then the least)."""
    ok = [r for r in records if r.status == "ok" and THROUGHPUT in r.metrics]
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
) -> list[CapacityResult]:
    """Every combination's search at once, each in a thread whose probes are the engine's
    cells; results saved (after those kept from an earlier run, then in the combinations'
    order) as each search ends. An interrupt stops every search's cells."""
    done: dict[int, CapacityResult] = {}
    with terminate_as_interrupt(), ThreadPoolExecutor(max(1, len(combos))) as pool:
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
