"""A run of capacity searches: which searches a selection asks for, what they will cost, and
running them with progress into one capacity folder (its results file and probes' store).

`membench capacity` runs one at the budget it is given; `membench bench` runs one per workload
at the budget its preset declares (Preset.capacity_budgets), after the preset's cells, so that
the main job ends with the decision tables. Framework-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from membench import paths, registry
from membench.capacity.compiled_guess import first_batches
from membench.capacity.first_guess import makes_compiled_guess, model_guess
from membench.capacity.search import capacity, search_in_parallel
from membench.capacity.search_steps import MAX_BATCH, Budget
from membench.cells.engines import Engine
from membench.cells.estimate import Forecast, History
from membench.cells.planning import declared_refusal
from membench.cells.worker_launch import DEFAULT_OPTIONS, WorkerOptions
from membench.metrics import PEAK_DEVICE_PROCESS_BYTES, SIDE_BY_SIDE_ENV
from membench.records import (
    LEFT_OUT,
    CapacityResult,
    Cell,
    RecordStore,
    save_capacity_results,
    timestamp,
)

# Probes a guided search is expected to take (the estimate's figure, not a limit): the mean of
# the main job's searches measured by 2ca76f8 (31 searches: median 3, mean 2.9, worst 5).
EXPECTED_PROBES = 2.9
# With repeats, the first measurements and the batches measured again, the noise rule's steps
# below an answer within its noise included: the means of the 57 cpu-capacity searches under
# the rule committed by 89844f7 (three workloads, 3 repeats: 13.2 probes a search, median 12,
# worst 36).
EXPECTED_FIRST_PROBES_REPEATED = 5.7
EXPECTED_REPEATED_BATCHES = 3.7


def expected_probes(repeats: int) -> float:
    """Probes a guided search is expected to take with `repeats` measurements per boundary
    batch (the estimate's figure)."""
    if repeats <= 1:
        return EXPECTED_PROBES
    return EXPECTED_FIRST_PROBES_REPEATED + EXPECTED_REPEATED_BATCHES * (repeats - 1)


@dataclass(frozen=True)
class SearchPlan:
    """The searches of one workload within one budget, and where they are kept."""

    preset: str
    workload: str
    budget: Budget
    combos: tuple[tuple[str, str], ...]  # (framework, strategy)
    folder: Path
    max_batch: int = MAX_BATCH
    device_bytes: int | None = None  # the GPU's memory, of which the budget is a share
    repeats: int = 1  # measurements of the answer and of the next batch
    # (framework, strategy, why) the preset does not measure: results that say so, no probe
    left_out: tuple[tuple[str, str, str], ...] = ()

    @property
    def store(self) -> RecordStore:
        return RecordStore(self.folder / paths.PROBES)

    @property
    def results_file(self) -> Path:
        return self.folder / paths.CAPACITY_FILE


def plan_searches(
    preset: str,
    workload: str,
    frameworks: Sequence[str],
    strategies: Sequence[str],
    budget: Budget,
    machine: str,
    commit: str,
    max_batch: int = MAX_BATCH,
    device_bytes: int | None = None,
    main_job: bool = False,
    repeats: int | None = None,
    settled: frozenset[tuple[str, str, str]] = frozenset(),
) -> SearchPlan:
    """One workload's searches: every framework x strategy whose cells the preset measures
    (a refused one is kept: its result says why, at no cost); for the main job (bench) also
    without the searches the preset leaves out of it for their time, which `membench
    capacity` runs when asked. repeats: the preset's where not given. What the preset does
    not measure at all is kept as left out, with its reason. settled: (workload, framework,
    strategy) searches another run settled (a GPU plan's), not planned."""
    p = registry.preset(preset)
    leaves_out = p.leaves_out_of_capacity if main_job else p.leaves_out
    combos = tuple(
        (f, s) for s in strategies for f in frameworks
        if leaves_out(f, workload, s) is None and (workload, f, s) not in settled
    )  # fmt: skip
    skipped = tuple(
        (f, s, why) for s in strategies for f in frameworks
        if (why := p.leaves_out(f, workload, s)) is not None
    )  # fmt: skip
    folder = paths.capacity_run(machine, preset, budget.bytes, commit, whole_card=budget.whole_card)
    return SearchPlan(
        preset, workload, budget, combos, folder, max_batch, device_bytes,
        p.capacity_repeats if repeats is None else repeats, skipped,
    )  # fmt: skip


def probe_cells(plan: SearchPlan, machine: str) -> list[Cell]:
    """The cells a plan's searches are expected to probe: at the model's guess and one step
    above (where the workload has no model, the doubling's first batches)."""
    cells = []
    for framework, strategy in plan.combos:
        step = registry.strategy(strategy).accumulate
        guess = model_guess(
            plan.workload, framework, strategy, plan.preset, plan.budget, machine, plan.max_batch
        )
        first = max(step, guess.batch // step * step) if guess else step
        for batch in (first, min(first + step, plan.max_batch)):
            cells.append(Cell(plan.workload, framework, strategy, batch, plan.preset))
    return cells


def forecast_searches(plans: Sequence[SearchPlan], machine: str) -> Forecast:
    """The searches' estimate: each expected probe from this machine's history (the presets'
    cells and earlier probes), scaled to the probes a search has still to take (probes_left);
    a refused search costs nothing; a search already in its results file, nothing."""
    history = History.of_machine(machine, [p.store.root for p in plans] + paths.probe_stores())
    estimates = {}
    for plan in plans:
        done = _done(plan)
        stored = stored_probes(plan)
        cells = probe_cells(plan, machine)
        for cell in cells:
            refused = declared_refusal(cell) is not None
            kept = (cell.framework, cell.strategy) in done
            found = history.estimate(cell, refused=refused, kept=kept)
            probes = probes_left(plan.repeats, stored.get((cell.framework, cell.strategy), 0))
            seconds = found.seconds * probes / 2
            if not (refused or kept) and cell in cells[::2]:  # the search's first probe
                seconds += guess_seconds(plan, cell, history)
            estimates[cell] = type(found)(seconds, found.basis)
    return Forecast(estimates)


def stored_probes(plan: SearchPlan) -> dict[tuple[str, str], int]:
    """Per (framework, strategy), the measurements of the plan's workload already in its
    stores (first measurements and repeats): what a resumed search measures no more."""
    counts: dict[tuple[str, str], int] = {}
    for root in paths.answer_stores(plan.folder):
        for record in RecordStore(root).scan()[0]:  # a corrupt file: the run itself names it
            if record.cell.workload == plan.workload:
                key = (record.cell.framework, record.cell.strategy)
                counts[key] = counts.get(key, 0) + 1
    return counts


def probes_left(repeats: int, stored: int) -> float:
    """Probes a search is expected still to take, `stored` of them measured by an earlier
    run: the expected count less those, and at least one boundary's measurements (a search
    past the expected count is in its long tail, whose length nothing here knows)."""
    return max(expected_probes(repeats) - stored, float(repeats))


def guess_seconds(plan: SearchPlan, first: Cell, history: History) -> float:
    """What a search's compiled guess costs (JAX on a host budget:
    membench.capacity.compiled_guess), none where it is not made or is kept from an earlier run:
    each of its processes estimated as a cell at its batch (they build, compile and run at most one
    step, so this errs high): the two first batches and the search's first probe."""
    if not makes_compiled_guess(plan.budget, first.framework):
        return 0.0
    kept = paths.guess_file(plan.store.root, first.workload, first.framework, first.strategy)
    if kept.exists():
        return 0.0
    step = registry.strategy(first.strategy).accumulate
    batches = (*first_batches(step, plan.max_batch), first.batch_size)
    return sum(history.estimate(replace(first, batch_size=b)).seconds for b in batches)


def _done(plan: SearchPlan) -> set[tuple[str, str]]:
    from membench.records import load_capacity_results

    if not plan.results_file.exists():
        return set()
    try:
        results = load_capacity_results(plan.results_file)
    except ValueError:
        return set()
    return {(r.framework, r.strategy) for r in results if r.workload == plan.workload}


def run_searches(
    plan: SearchPlan,
    engine: Engine,
    say,
    tolerance: float = 0,
    first: int = 1,
    guide: bool = True,
    machine: str = "",
    options: WorkerOptions = DEFAULT_OPTIONS,
    side_by_side: int = 1,
) -> list[CapacityResult]:
    """Every search of the plan, results saved after each; a search already in the results
    file (same workload, framework, strategy, budget) is kept, so a rerun resumes. options:
    the run's (memory cap, timeline, trace), with which every probe's worker is launched.
    side_by_side: searches run at once on this machine's device (the local engine), each probe
    within its own budget, its record marked (its peaks count, its speed does not), and on a
    host the memory cap shared out among them."""
    from membench.records import load_capacity_results

    results = load_capacity_results(plan.results_file) if plan.results_file.exists() else []
    done = {(r.workload, r.framework, r.strategy) for r in results}
    todo = [(plan.workload, f, s) for f, s in plan.combos if (plan.workload, f, s) not in done]
    skipped = [left_out_result(plan, f, s, why) for f, s, why in plan.left_out
               if (plan.workload, f, s) not in done]  # fmt: skip
    if skipped:
        results += skipped
        save_capacity_results(results, plan.results_file)
        for r in skipped:
            say(f"{r.workload} {r.framework} {r.strategy}: {found(r)}")
    local = engine.name == "local"
    if local and side_by_side > 1:
        options = beside(options, side_by_side)

    def search(w: str, f: str, s: str, engine: Engine) -> CapacityResult:
        return written(capacity(
            w, f, s, plan.preset, plan.budget, plan.store, plan.device_bytes, plan.max_batch,
            tolerance, first, engine, machine, guide, plan.repeats, options,
            lambda line: say(f"  {f} {s}: {line}"),
        ))  # fmt: skip

    def report(i: int, r: CapacityResult) -> None:
        say(f"[{i}/{len(todo)}] {r.workload} {r.framework} {r.strategy}: {found(r)}")

    if local and side_by_side <= 1:
        for i, (w, f, s) in enumerate(todo, start=1):
            say(f"[{i}/{len(todo)}] {w} {f} {s}: searching within {gib(plan.budget.bytes)}")
            results.append(search(w, f, s, engine))
            save_capacity_results(results, plan.results_file)
            say(f"  {found(results[-1])}")
        return results
    at_once = side_by_side if local else None  # a cluster: all at once
    fresh = search_in_parallel(todo, search, engine, plan.results_file, report, results, at_once)
    return results + fresh


def beside(options: WorkerOptions, n: int) -> WorkerOptions:
    """The options of workers launched n at a time on one machine: marked in their
    environment (and so in their records), and, where no cap was given, this host's default
    memory cap shared out among them."""
    cap = options.memory_cap if options.memory_cap is not None else options.cap() / n
    return replace(options, memory_cap=cap, env={**options.env, SIDE_BY_SIDE_ENV: str(n)})


# What a search ends in when a GPU plan need not search it again, whichever commit measured
# it (an error may be mended by a later commit; a left-out or unsettled one has no answer).
ANSWERED = ("ok", "unsupported", "swaps")


def settled_runs(
    machine: str, preset: str, budget_bytes: float, workload: str, strategy: str,
    results: Path | None = None, whole_card: bool = False,
) -> dict[str, str]:  # fmt: skip
    """framework -> the capacity run (folder) that settled this search on this machine, by
    any commit: a GPU plan, whose device time is short, spends none on what is settled (a
    card's whole budget and an allocator limit of the same size settle each other nothing)."""
    from membench.records import load_capacity_results

    found = {}
    wanted = (workload, strategy, preset, paths.budget_mib(budget_bytes))
    for path in paths.capacity_files(results, machine=machine, preset=preset,
                                     whole_card=whole_card):  # fmt: skip
        try:
            searches = load_capacity_results(path)
        except ValueError:
            continue  # the report names an unreadable file; here it only settles nothing
        for r in searches:
            key = (r.workload, r.strategy, r.preset, paths.budget_mib(r.budget_bytes))
            card = r.budget_layer == PEAK_DEVICE_PROCESS_BYTES
            if key == wanted and r.status in ANSWERED and card == whole_card:
                found[r.framework] = path.parent.name
    return found


def left_out_result(plan: SearchPlan, framework: str, strategy: str, why: str) -> CapacityResult:
    """The result of a search the plan's preset leaves out: its reason, no probe."""
    budget = plan.budget
    return written(CapacityResult(
        plan.workload, framework, strategy, plan.preset, budget.bytes, budget.layer,
        budget.enforced, budget.note, 0, None, LEFT_OUT, why, [],
    ))  # fmt: skip


def written(result: CapacityResult) -> CapacityResult:
    """The result stamped with the time it is written (as a probe's record dates its start)."""
    return replace(result, written_at=timestamp())


def found(result: CapacityResult) -> str:
    """One line: the verified batch, the model's, and the probes that decided it."""
    probes = ", ".join(f"{p['batch_size']}{'+' if p['fits'] else '-'}" for p in result.probes)
    if result.status != "ok":
        return f"{result.status}: {result.reason[:120]}"
    model = f"; model said {result.predicted_batch}" if result.predicted_batch is not None else ""
    return f"largest batch {result.largest_fit}{model}; probes {probes}"


def gib(size: float) -> str:
    return f"{size / 2**30:.2f} GiB"
