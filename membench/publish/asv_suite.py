"""What asv runs: one benchmark class per preset and workload, parametrized from the registry.

The classes are the whole suite, whatever a run selects or the host is: every preset's
workloads, each over the frameworks, strategies (a sharding one at the preset's world size,
`fsdp@w2`) and batch sizes of the cells the preset runs on its own device (Grid). asv's
parameters are a product, and a framework does not run every strategy: the product's sets that
no run measures (jittor x checkpoint) are asv's skip_params, which asv never sets up or runs,
and a class tracks only the metrics its preset's cells produce (device memory on a GPU preset,
sums and maxima over ranks where a strategy shards). asv writes what it discovers to
results/asv/benchmarks.json, so that file never depends on what one run measured, and a run
that measures a few cells leaves it byte-identical. The preset is part of a class's name
(Resnet50_cpu, Resnet50_smoke): asv compares, shows and draws a preset only against itself
(docs/versions.md says why a class).

One worker run per cell serves all its metrics: the first track_ method that needs a cell
measures it through the runner and stores the Record; every other track_ method of that cell
reads the stored Record. A cell is measured only where the run selects it: its class's preset
is MEMBENCH_PRESET (default: from the device) and MEMBENCH_WORKLOADS, MEMBENCH_FRAMEWORKS,
MEMBENCH_STRATEGIES, MEMBENCH_BATCH_SIZES and MEMBENCH_WORLD_SIZE (comma-separated; default:
all of the preset's) hold it. Any other cell reports what its preset's store at this commit
holds (MEMBENCH_STORE for the selected preset) and is n/a where it holds nothing: asv's result
for a commit is the commit's records, never a partial run's view of them. A cell that did not
end `ok`, or one measured on a busy host (metrics.BUSY_SHARE) unless recorded with
--allow-busy, raises NotImplementedError in setup, which asv shows as n/a (its status and
reason stay in the Record). A metric a cell did not produce (XLA's buffers of a torch cell) is
n/a as well. asv reads every benchmark as lower is better: a signed error is published as its
size (metrics.Metric.magnitude_of), and the figures where higher is better are kept out of
asv's regression search (asv.conf.json's regressions_first_commits).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from itertools import product
from pathlib import Path

from membench import paths, registry, settings
from membench.backends import BuildSpec
from membench.cells import planning, supervision
from membench.environment import default_preset, git_commit, machine_name
from membench.metrics import (
    ALLOW_BUSY_ENV,
    ASV_METRICS,
    ASV_SAMPLES,
    BUSY_METRIC,
    METRICS,
    Metric,
    busy_share,
    kept_out_as_busy,
)
from membench.records import (
    RANKS_MARK,
    CapacityResult,
    Cell,
    Record,
    RecordStore,
    allow_busy,
    load_capacity_results,
    parse_strategy_param,
)
from membench.releases.versions import Stack

# Bump when what a benchmark measures changes: asv keys history on it.
SUITE_VERSION = "1"


def _selected(variable: str, valid: list) -> list:
    return settings.value(variable) or valid


def suite_preset() -> str:
    """The preset a run measures (MEMBENCH_PRESET, else the device's)."""
    return registry.preset(default_preset()).name


def default_store(preset: str) -> Path:
    """This machine's records of a preset at this commit, committed beside asv's results."""
    return paths.preset_store(machine_name(), preset, str(git_commit()["commit"]))


def active_stack() -> Stack | None:
    """The framework version of this environment, when asv runs the version matrix."""
    return settings.value("MEMBENCH_STACK")


def suite_store(preset: str | None = None) -> RecordStore:
    """Where a preset's records are: MEMBENCH_STORE for the preset the run measures, else
    the preset's store at this commit (a version environment's own folder inside either)."""
    raw = settings.value("MEMBENCH_STORE")
    preset = preset or suite_preset()
    root = raw if raw and preset == suite_preset() else default_store(preset)
    stack = active_stack()
    return RecordStore(root / stack.label if stack else root)


def selected_workloads() -> list[str]:
    return _selected("MEMBENCH_WORKLOADS", list(registry.WORKLOADS))


def selected_frameworks() -> list[str]:
    """MEMBENCH_FRAMEWORKS, else the one framework of this version environment, else all."""
    stack = active_stack()
    return _selected(
        "MEMBENCH_FRAMEWORKS", [stack.framework] if stack else list(registry.FRAMEWORKS)
    )


def preset_strategies(preset: registry.Preset) -> list[str]:
    return list(preset.strategies or registry.STRATEGIES)


def strategy_param(name: str, preset: registry.Preset, world_size: int | None = None) -> str:
    """The strategy parameter of a cell: its name, with @wW where it runs on W > 1 ranks."""
    ranks = registry.world_size_of(registry.strategy(name), preset, world_size)
    return name if ranks == 1 else f"{name}{RANKS_MARK}{ranks}"


def preset_device(preset: registry.Preset) -> str:
    """The device a preset's cells are meant for: asv's catalogue is decided on it, never on
    the host that discovers the suite (a CPU preset run on a GPU host measures there what its
    backends accept on the GPU; a cell its catalogue leaves out stays in the records)."""
    return "cuda" if preset.gpu else "cpu"


def refusal_on(cell: Cell, device: str) -> str | None:
    """Why the cell's backend refuses it on a device (Backend.refusal, the declarations the
    runner asks of this host's device); None where it runs, or where its backend cannot be
    loaded here (its worker would say why)."""
    try:
        backend = registry.load_backend(cell.framework)
    except (ImportError, AttributeError):
        return None
    return backend.refusal(BuildSpec.of(cell), device)


def _cell(workload: str, framework: str, strategy: str, batch: int, p: registry.Preset) -> Cell:
    ranks = registry.world_size_of(registry.strategy(strategy), p)
    return Cell(workload, framework, strategy, batch, p.name, ranks)


def strategy_homes(p: registry.Preset, device: str) -> dict[tuple[str, str], str]:
    """planning.strategy_homes of the whole preset (every workload, framework and strategy, each
    workload's first batch), decided on the preset's device: where a preset that runs each
    strategy once runs it. tests/test_asv_catalogue.py holds the two to the same answer."""
    if not p.once_per_strategy:
        return {}
    rank = {w: i for i, w in enumerate(p.once_per_strategy)}
    ordered = sorted(p.sizes, key=lambda w: rank.get(w, len(rank)))
    homes = {}
    for f in registry.FRAMEWORKS:
        for s in preset_strategies(p):
            if s == planning.EVERY_WORKLOAD:
                continue
            kept = [w for w in ordered if not p.leaves_out(f, w, s)]
            runs = [
                w for w in kept
                if refusal_on(_cell(w, f, s, p.size(w).batch_sizes[0], p), device) is None
            ]  # fmt: skip
            if runs or kept:
                homes[(f, s)] = (runs or kept)[0]
    return homes


@dataclass(frozen=True)
class Grid:
    """A class's parameters: asv's product of frameworks, strategy parameters and batch sizes,
    each only those of some cell the preset runs on its device, and the product's sets that
    no run of the preset measures (holes: asv's skip_params, never set up nor run)."""

    frameworks: list[str]
    strategies: list[str]
    batch_sizes: list[int]
    holes: list[tuple[str, str, int]]

    @property
    def params(self) -> list[list]:
        return [self.frameworks, self.strategies, self.batch_sizes]

    @property
    def sharded(self) -> bool:
        """Whether some strategy of the grid spreads a cell over ranks (@wW)."""
        return any(RANKS_MARK in s for s in self.strategies)


def grid(workload: str, preset: registry.Preset) -> Grid:
    """The class's grid: the cells the preset runs (its strategies, each workload's batches,
    what it leaves to another left out) that the backends' declarations accept on the preset's
    device."""
    device = preset_device(preset)
    homes = strategy_homes(preset, device)
    runs = set()
    for f, s, b in product(
        registry.FRAMEWORKS, preset_strategies(preset), preset.size(workload).batch_sizes
    ):
        if preset.leaves_out(f, workload, s) or homes.get((f, s), workload) != workload:
            continue
        if refusal_on(_cell(workload, f, s, b, preset), device) is None:
            runs.add((f, strategy_param(s, preset), b))
    frameworks = [f for f in registry.FRAMEWORKS if any(c[0] == f for c in runs)]
    strategies = [
        p for s in preset_strategies(preset)
        if any(c[1] == (p := strategy_param(s, preset)) for c in runs)
    ]  # fmt: skip
    batches = [b for b in preset.size(workload).batch_sizes if any(c[2] == b for c in runs)]
    holes = [c for c in product(frameworks, strategies, batches) if c not in runs]
    return Grid(frameworks, strategies, batches, holes)


def params_for(workload: str, preset: registry.Preset) -> list[list]:
    """A class's parameters (Grid.params)."""
    return grid(workload, preset).params


def _world_size_override() -> int | None:
    return settings.value("MEMBENCH_WORLD_SIZE")


def selects(cell: Cell) -> bool:
    """Whether this run measures the cell (otherwise asv only reads it from its store)."""
    if cell.preset != suite_preset():
        return False
    p = registry.preset(cell.preset)
    batches = _selected("MEMBENCH_BATCH_SIZES", []) or list(p.size(cell.workload).batch_sizes)
    ranks = registry.world_size_of(registry.strategy(cell.strategy), p, _world_size_override())
    return (
        cell.workload in selected_workloads()
        and cell.framework in selected_frameworks()
        and cell.strategy in _selected("MEMBENCH_STRATEGIES", preset_strategies(p))
        and cell.batch_size in batches
        and cell.world_size == ranks
    )


# Set when asv records a cluster run for one of its machines: only cells that machine measured
# count, and nothing is measured here (a missing cell is n/a, not a local measurement).
RECORDS_OF = "MEMBENCH_RECORDS_OF"


def cell_record(
    workload: str, framework: str, strategy: str, batch_size: int, preset: str | None = None
) -> Record:
    """The cell's stored Record, measuring it first where this run selects it."""
    name, ranks = parse_strategy_param(strategy)
    cell = Cell(workload, framework, name, int(batch_size), preset or suite_preset(), ranks)
    if cell.preset == suite_preset():
        # asv's grid is a product; the preset may leave some of its cells to another (n/a here)
        if reason := planning.left_to_another(cell, selected_workloads()):
            raise NotImplementedError(f"left to another preset: {reason}")
    store = suite_store(cell.preset)
    machine = settings.value(RECORDS_OF)
    if machine:
        record = store.get(cell)
        if record is None or record.environment.get("machine") != machine:
            raise NotImplementedError(f"not measured on {machine}")
        return record
    if not selects(cell):
        record = store.get(cell)
        if record is None:
            why = (
                "outside MEMBENCH_WORKLOADS/FRAMEWORKS/STRATEGIES/BATCH_SIZES"
                if cell.preset == suite_preset()
                else f"only MEMBENCH_PRESET's cells are measured, here {suite_preset()}"
            )
            raise NotImplementedError(f"not measured at this commit ({why}; {store.root})")
        return record
    record = supervision.run([cell], store, supervision.RunControl(retry_failed=False)).records[0]
    if settings.value(ALLOW_BUSY_ENV) and busy_share(record.metrics) is not None:
        record = allow_busy(record, store)
    return record


def usable(record: Record) -> None:
    """Raise NotImplementedError (asv: n/a) for a record asv must not show: one that did not
    end ok, or one measured on a busy host and not recorded anyway (--allow-busy)."""
    if record.status != "ok":
        raise NotImplementedError(f"{record.status}: {record.reason}")
    if kept_out_as_busy(record.metrics, record.environment):
        raise NotImplementedError(
            f"busy host: other processes used {busy_share(record.metrics):.0%} of the CPU "
            "(membench bench measures it again; --allow-busy records it anyway)"
        )


class WorkloadBenchmarks:
    """Base of the per-workload asv classes (not itself collected: it has no workload)."""

    workload = ""
    preset = ""
    param_names = ["framework", "strategy", "batch_size"]
    # the parameter sets asv neither sets up nor runs (asv_runner's skip_params: Grid.holes)
    skip_params: list[tuple] = []
    # asv's limit on one benchmark run (wall clock under its fork server): far above any
    # cell's own limit, which the runner enforces and records
    timeout = 3600.0
    version = SUITE_VERSION

    def setup(self, framework: str, strategy: str, batch_size: int) -> None:
        record = cell_record(self.workload, framework, strategy, batch_size, self.preset)
        usable(record)
        self.record = record

    def _metric(self, name: str) -> float:
        if name not in self.record.metrics:
            from asv_runner.benchmarks.mark import SkipNotImplemented

            raise SkipNotImplemented(f"{name} is not in this cell's record")
        return float(self.record.metrics[name])

    def track_step_time(self, *params) -> dict:
        self._metric(ASV_METRICS[ASV_SAMPLES])
        return {"samples": list(self.record.step_times), "number": 1}


ASV_UNITS = {"s": "seconds"}  # asv's names where they differ from the catalogue's


def _tracker(metric: Metric):
    if metric.magnitude_of:

        def track(self: WorkloadBenchmarks, *params) -> float:
            return abs(self._metric(metric.magnitude_of))

    else:

        def track(self: WorkloadBenchmarks, *params) -> float:
            return self._metric(metric.name)

    return track


# One track_ method per metric the catalogue (membench.metrics) gives an asv name.
for _metric in METRICS.values():
    if _metric.asv:
        if _metric.asv != ASV_SAMPLES:
            setattr(WorkloadBenchmarks, _metric.asv, _tracker(_metric))
        _method = getattr(WorkloadBenchmarks, _metric.asv)
        _method.unit = ASV_UNITS.get(_metric.unit, _metric.unit)
        _method.__doc__ = _metric.description


DEVICE_LAYERS = ("device-allocator", "device-process")
# the capacity classes' figures: the more the better
CAPACITY_TRACKS = ("track_largest_batch", "track_throughput_at_capacity")


def kept_out_of_regressions() -> set[str]:
    """The track_ methods asv publish's regression search leaves out (asv.conf.json's
    regressions_first_commits: null; tests/test_asv_catalogue.py holds the two together):
    those better higher (asv reads every benchmark as lower is better), speed (its figures
    compare only within one sweep, and asv's search runs along commits measured on different
    days) and a step's added memory (`*_delta_*`: a difference of two readings, often under a
    MiB, where asv's ratio, with no floor, calls 0.15 -> 26 MiB a 175x regression). `membench
    compare` judges them all, each in its direction and above its floor."""
    other = {
        m.asv for m in METRICS.values() if m.asv and (m.layer == "speed" or "_delta" in m.name)
    }
    return higher_is_better() | other


def higher_is_better() -> set[str]:
    """The track_ methods whose figure is better higher. asv reads every benchmark as lower is
    better, so asv.conf.json's regressions_first_commits keeps these out of asv publish's
    regression search (tests/test_asv_catalogue.py holds the two together)."""
    return {m.asv for m in METRICS.values() if m.asv and m.higher_is_better} | set(CAPACITY_TRACKS)


def tracked(preset: registry.Preset, cells: Grid) -> list[str]:
    """The track_ methods of a class: the catalogue's asv metrics its cells produce (device
    memory only on a GPU preset, sums and maxima over ranks only where a strategy shards)."""
    out = []
    for m in METRICS.values():
        if not m.asv:
            continue
        if m.layer in DEVICE_LAYERS and not preset.gpu:
            continue
        if m.name.endswith("_over_ranks") and not cells.sharded:
            continue
        out.append(m.asv)
    return out


def benchmark_classes() -> dict[str, type]:
    """One asv class per preset and workload (Resnet50_cpu, ...), whatever is selected: its
    grid's parameters and holes, and only its own metrics (asv collects a class's functions,
    so a metric its cells never produce is None there)."""
    registry.load_plugins()  # benchmarks/suite.py, asv's entry point, builds the classes here
    classes = {}
    for preset in registry.PRESETS.values():
        for name in preset.sizes:
            cls_name = paths.asv_class_name(name, preset.name)
            cells = grid(name, preset)
            own = tracked(preset, cells)
            absent = {m: None for m in ASV_METRICS if m not in own}
            classes[cls_name] = type(
                cls_name,
                (WorkloadBenchmarks,),
                {
                    "workload": name, "preset": preset.name, "params": cells.params,
                    "skip_params": cells.holes, **absent,
                },
            )  # fmt: skip
    return classes


def capacity_budgets_mib(workload: str, preset: registry.Preset) -> list[int]:
    """A capacity class's budgets, in MiB as capacity runs are named: those its preset
    declares for the workload. A search at another --budget stays in results/capacity and on
    the pages, not in asv, whose history compares one budget's answers only."""
    return [paths.budget_mib(b) for b in preset.capacity_budgets.get(workload, ())]


def capacity_file(
    preset: str, budget_mib: int, machine: str | None = None, commit: str | None = None,
    results: Path | None = None,
) -> Path | None:  # fmt: skip
    """MEMBENCH_CAPACITY_FILE where it is the run's preset and budget, else the newest
    capacity search of the commit (this one), machine (this one), preset and budget: each file
    by the preset and budget its searches hold (budget_bytes), never by its folder's name."""
    raw = settings.value("MEMBENCH_CAPACITY_FILE")
    if raw and machine is None and commit is None and _holds(Path(raw), preset, budget_mib):
        return Path(raw)
    found = paths.capacity_files(
        results, machine=machine or machine_name(), preset=preset,
        commit=commit or str(git_commit()["commit"]),
    )  # fmt: skip
    found = sorted((p for p in found if _holds(p, preset, budget_mib)), key=os.path.getmtime)
    return found[-1] if found else None


def _holds(path: Path, preset: str, budget_mib: int) -> bool:
    """Whether a capacity results file holds searches of this preset within this budget."""
    try:
        searches = load_capacity_results(path)
    except ValueError:  # unreadable or absent: asv reports n/a, the loader names the file
        return False
    return any(
        r.preset == preset and paths.budget_mib(r.budget_bytes) == budget_mib for r in searches
    )


def stored_search(
    preset: str, workload: str, framework: str, strategy: str, budget_mib: int,
    machine: str | None = None, commit: str | None = None, results: Path | None = None,
) -> CapacityResult:  # fmt: skip
    """The commit's answer to one search at one budget; NotImplementedError (asv: n/a) where
    none is stored or the search did not end `ok`."""
    path = capacity_file(preset, budget_mib, machine, commit, results)
    if path is None or not path.exists():
        raise NotImplementedError(f"no capacity search stored within {budget_mib} MiB")
    for result in load_capacity_results(path):
        if (result.preset, result.workload, result.framework, result.strategy) == (
            preset, workload, framework, strategy
        ):  # fmt: skip
            if result.status != "ok":
                raise NotImplementedError(f"{result.status}: {result.reason}")
            return result
    raise NotImplementedError(f"not searched in {path}")


class CapacityBenchmarks:
    """Base of the per-preset and workload capacity classes: they read `membench capacity`'s
    results (a search is many fresh processes; asv only records it), one budget a parameter
    set, so that a commit's history never sets one budget's answer beside another's."""

    workload = ""
    preset = ""
    param_names = ["framework", "strategy", "budget_mib"]
    skip_params: list[tuple] = []
    version = SUITE_VERSION

    def setup(self, framework: str, strategy: str, budget_mib: int) -> None:
        self.result = stored_search(self.preset, self.workload, framework, strategy, budget_mib)

    def track_largest_batch(self, *params) -> float:
        """Largest batch whose step ran within the budget (see the result's note)."""
        return float(self.result.largest_fit)

    track_largest_batch.unit = "samples"

    def track_throughput_at_capacity(self, *params) -> float:
        from asv_runner.benchmarks.mark import SkipNotImplemented

        if self.result.throughput_at_largest_fit is None:
            raise SkipNotImplemented("no batch fitted, or every run of it on a busy host")
        share = self.result.foreign_cpu_share_at_fit
        if share is not None and busy_share({BUSY_METRIC: share}) is not None:
            raise SkipNotImplemented(f"busy host: {share:.0%} foreign CPU at the answer")
        return float(self.result.throughput_at_largest_fit)

    track_throughput_at_capacity.unit = "samples/s"


def capacity_grid(workload: str, preset: registry.Preset) -> tuple[list[list], list[tuple]]:
    """A capacity class's parameters and holes: the frameworks and strategies (any, as
    `membench capacity -s` may name one the preset does not measure) of the searches the
    preset does not leave out and the declarations accept on its device at the search's
    smallest batch, on one rank as every search runs, each at every budget the preset
    declares for the workload."""
    device = preset_device(preset)
    runs = set()
    for f, s in product(registry.FRAMEWORKS, registry.STRATEGIES):
        if preset.leaves_out(f, workload, s):
            continue
        batch = registry.strategy(s).accumulate
        if refusal_on(Cell(workload, f, s, batch, preset.name), device) is None:
            runs.add((f, s))
    frameworks = [f for f in registry.FRAMEWORKS if any(c[0] == f for c in runs)]
    strategies = [s for s in registry.STRATEGIES if any(c[1] == s for c in runs)]
    budgets = capacity_budgets_mib(workload, preset)
    holes = [(f, s, b) for f, s in product(frameworks, strategies) if (f, s) not in runs
             for b in budgets]  # fmt: skip
    return [frameworks, strategies, budgets], holes


def capacity_classes() -> dict[str, type]:
    """One capacity class per preset and workload (Resnet50Capacity_cpu_capacity, ...) whose
    preset declares budgets for it, over the frameworks, strategies and budgets its searches
    can run (capacity_grid)."""
    registry.load_plugins()
    classes = {}
    for preset in registry.PRESETS.values():
        for name in preset.sizes:
            if not capacity_budgets_mib(name, preset):
                continue
            cls_name = paths.asv_class_name(name, preset.name, capacity=True)
            params, holes = capacity_grid(name, preset)
            classes[cls_name] = type(
                cls_name,
                (CapacityBenchmarks,),
                {"workload": name, "preset": preset.name, "params": params, "skip_params": holes},
            )
    return classes


def _alternatives(values: list) -> str:
    """asv's spelling of parameter values (repr), as regex alternatives."""
    return "|".join(re.escape(repr(v)) for v in values)


def bench_regexes(preset: str, selection: dict[str, list] | None = None) -> list[str]:
    """asv --bench regexes for the selected cells of a preset: one per workload class, over
    the parameter sets asv names `suite.Resnet50_cpu.track_x('torch', 'baseline', 4)`; asv keeps
    its earlier results for every other parameter set (and never runs another preset's). Only
    the preset's grid is asv's: a batch or world size outside it stays in the records (no
    regex where a class has none of the selection)."""
    p = registry.preset(preset)
    selection = selection or {}
    world = (selection.get("world_size") or [None])[0]
    names = selection.get("strategies") or preset_strategies(p)
    out = []
    for workload in selection.get("workloads") or list(p.sizes):
        grid_frameworks, grid_strategies, grid_batches = params_for(workload, p)
        wanted_frameworks = selection.get("frameworks") or grid_frameworks
        frameworks = [f for f in wanted_frameworks if f in grid_frameworks]
        strategies = [
            param for s in names if (param := strategy_param(s, p, world)) in grid_strategies
        ]
        wanted = selection.get("batch_sizes") or grid_batches
        batches = [int(b) for b in wanted if int(b) in grid_batches]
        if not (frameworks and strategies and batches):
            continue
        out.append(
            rf"^suite\.{paths.asv_class_name(workload, preset)}\.\w+\("
            rf"({_alternatives(frameworks)}), ({_alternatives(strategies)}), "
            rf"({_alternatives(batches)})\)$"
        )
    return out


def capacity_regexes(preset: str, selection: dict[str, list], budget_bytes: float) -> list[str]:
    """asv --bench regexes for the capacity searches of a run within one budget: the
    selected frameworks and strategies of each selected workload's capacity class, where the
    preset declares that budget for the workload (none elsewhere: asv keeps no other)."""
    p = registry.preset(preset)
    budget_mib = paths.budget_mib(budget_bytes)
    out = []
    for workload in selection.get("workloads") or list(p.sizes):
        if budget_mib not in capacity_budgets_mib(workload, p):
            continue
        (grid_frameworks, grid_strategies, _), _ = capacity_grid(workload, p)
        frameworks = [
            f for f in selection.get("frameworks") or grid_frameworks if f in grid_frameworks
        ]
        strategies = [
            s for s in selection.get("strategies") or grid_strategies if s in grid_strategies
        ]
        if frameworks and strategies:
            out.append(
                rf"^suite\.{paths.asv_class_name(workload, preset, capacity=True)}\.\w+\("
                rf"({_alternatives(frameworks)}), ({_alternatives(strategies)}), "
                rf"({_alternatives([budget_mib])})\)$"
            )
    return out
