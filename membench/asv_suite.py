"""What asv runs: one benchmark class per preset and workload, parametrized from the registry.

The classes are the whole suite, whatever a run selects: every preset's workloads, each over
every framework, the preset's strategies (a sharding one at the preset's world size, `fsdp@w2`)
and the preset's batch sizes. asv writes what it discovers to results/asv/benchmarks.json, so
that file never depends on what one run measured, and a run that measures a few cells leaves
it byte-identical. The preset is part of a class's name (Resnet50_cpu, Resnet50_smoke): asv
compares, shows and draws a preset only against itself (docs/versions.md says why a class).

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
reason stay in the Record). A metric that does not exist on this device (GPU allocator peaks
on a CPU host) is n/a as well.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from membench import paths, registry, runner
from membench.environment import default_preset, git_commit, machine_name
from membench.metrics import (
    ALLOW_BUSY_ENV,
    ASV_METRICS,
    ASV_SAMPLES,
    BUSY_ALLOWED,
    METRICS,
    Metric,
    busy_share,
    kept_out_as_busy,
)
from membench.records import (
    RANKS_MARK,
    Cell,
    Record,
    RecordStore,
    load_capacity_results,
    parse_strategy_param,
)
from membench.versions import Stack, parse_stack

# Bump when what a benchmark measures changes: asv keys history on it.
SUITE_VERSION = "1"


def _selected(variable: str, valid: list[str]) -> list[str]:
    raw = os.environ.get(variable, "")
    names = [n.strip() for n in raw.split(",") if n.strip()]
    return names or valid


def suite_preset() -> str:
    """The preset a run measures (MEMBENCH_PRESET, else the device's)."""
    return registry.preset(default_preset()).name


def default_store(preset: str) -> Path:
    """This machine's records of a preset at this commit, committed beside asv's results."""
    return paths.preset_store(machine_name(), preset, str(git_commit()["commit"]))


def active_stack() -> Stack | None:
    """The framework version of this environment, when asv runs the version matrix."""
    spec = os.environ.get("MEMBENCH_STACK", "")
    return parse_stack(spec) if spec.strip() else None


def suite_store(preset: str | None = None) -> RecordStore:
    """Where a preset's records are: MEMBENCH_STORE for the preset the run measures, else
    the preset's store at this commit (a version environment's own folder inside either)."""
    raw = os.environ.get("MEMBENCH_STORE")
    preset = preset or suite_preset()
    root = Path(raw) if raw and preset == suite_preset() else default_store(preset)
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


def params_for(workload: str, preset: registry.Preset) -> list[list]:
    """A class's whole grid: every framework, the preset's strategies and batch sizes."""
    strategies = [strategy_param(s, preset) for s in preset_strategies(preset)]
    return [list(registry.FRAMEWORKS), strategies, list(preset.size(workload).batch_sizes)]


def strategy_param(name: str, preset: registry.Preset, world_size: int | None = None) -> str:
    """The strategy parameter of a cell: its name, with @wW where it runs on W > 1 ranks."""
    ranks = registry.world_size_of(registry.strategy(name), preset, world_size)
    return name if ranks == 1 else f"{name}{RANKS_MARK}{ranks}"


def _world_size_override() -> int | None:
    return int(os.environ.get("MEMBENCH_WORLD_SIZE") or 0) or None


def selects(cell: Cell) -> bool:
    """Whether this run measures the cell (otherwise asv only reads it from its store)."""
    if cell.preset != suite_preset():
        return False
    p = registry.preset(cell.preset)
    batches = [int(b) for b in _selected("MEMBENCH_BATCH_SIZES", [])] or list(
        p.size(cell.workload).batch_sizes
    )
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
        if reason := runner.left_to_another(cell, selected_workloads()):
            raise NotImplementedError(f"left to another preset: {reason}")
    store = suite_store(cell.preset)
    machine = os.environ.get(RECORDS_OF)
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
    record = runner.run([cell], store, runner.RunControl(retry_failed=False)).records[0]
    if os.environ.get(ALLOW_BUSY_ENV) and busy_share(record.metrics) is not None:
        record = allow_busy(record, store)
    return record


def allow_busy(record: Record, store: RecordStore) -> Record:
    """Mark a record measured on a busy host as recorded anyway (--allow-busy), in its store."""
    record.environment[BUSY_ALLOWED] = True
    store.put(record)
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

            raise SkipNotImplemented(f"{name} is not measured on this device")
        return float(self.record.metrics[name])

    def track_step_time(self, *params) -> dict:
        self._metric(ASV_METRICS[ASV_SAMPLES])
        return {"samples": list(self.record.step_times), "number": 1}


ASV_UNITS = {"s": "seconds"}  # asv's names where they differ from the catalogue's


def _tracker(metric: Metric):
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


def benchmark_classes() -> dict[str, type]:
    """One asv class per preset and workload (Resnet50_cpu, ...), whatever is selected."""
    registry.load_plugins()  # benchmarks/suite.py, asv's entry point, builds the classes here
    classes = {}
    for preset in registry.PRESETS.values():
        for name in preset.sizes:
            cls_name = paths.asv_class_name(name, preset.name)
            classes[cls_name] = type(
                cls_name,
                (WorkloadBenchmarks,),
                {"workload": name, "preset": preset.name, "params": params_for(name, preset)},
            )
    return classes


def capacity_file(preset: str | None = None) -> Path | None:
    """MEMBENCH_CAPACITY_FILE for the preset the run searched, else the newest capacity search
    of this commit and the preset."""
    preset = preset or suite_preset()
    raw = os.environ.get("MEMBENCH_CAPACITY_FILE")
    if raw and preset == suite_preset():
        return Path(raw)
    found = paths.capacity_files(
        machine=machine_name(), preset=preset, commit=str(git_commit()["commit"])
    )
    found.sort(key=os.path.getmtime)
    return found[-1] if found else None


class CapacityBenchmarks:
    """Base of the per-preset and workload capacity classes: they read `membench capacity`'s
    results (a search is many fresh processes; asv only records it)."""

    workload = ""
    preset = ""
    param_names = ["framework", "strategy"]
    version = SUITE_VERSION

    def setup(self, framework: str, strategy: str) -> None:
        path = capacity_file(self.preset)
        if path is None or not path.exists():
            raise NotImplementedError("no capacity search stored: run `membench capacity`")
        for result in load_capacity_results(path):
            if (result.workload, result.framework, result.strategy) == (
                self.workload, framework, strategy
            ):  # fmt: skip
                if result.status != "ok":
                    raise NotImplementedError(f"{result.status}: {result.reason}")
                self.result = result
                return
        raise NotImplementedError(f"not searched in {path}")

    def track_largest_batch(self, *params) -> float:
        """Largest batch whose step ran within the budget (see the result's note)."""
        return float(self.result.largest_fit)

    track_largest_batch.unit = "samples"

    def track_throughput_at_capacity(self, *params) -> float:
        if self.result.throughput_at_largest_fit is None:
            from asv_runner.benchmarks.mark import SkipNotImplemented

            raise SkipNotImplemented("no batch fitted")
        return float(self.result.throughput_at_largest_fit)

    track_throughput_at_capacity.unit = "samples/s"


def capacity_classes() -> dict[str, type]:
    """One capacity class per preset and workload (Resnet50Capacity_smoke, ...) over every
    framework and strategy."""
    registry.load_plugins()
    classes = {}
    for preset in registry.PRESETS.values():
        for name in preset.sizes:
            cls_name = paths.asv_class_name(name, preset.name, capacity=True)
            params = [list(registry.FRAMEWORKS), list(registry.STRATEGIES)]
            classes[cls_name] = type(
                cls_name,
                (CapacityBenchmarks,),
                {"workload": name, "preset": preset.name, "params": params},
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
    frameworks = selection.get("frameworks") or list(registry.FRAMEWORKS)
    names = selection.get("strategies") or preset_strategies(p)
    out = []
    for workload in selection.get("workloads") or list(p.sizes):
        _, grid_strategies, grid_batches = params_for(workload, p)
        strategies = [
            param for s in names if (param := strategy_param(s, p, world)) in grid_strategies
        ]
        wanted = selection.get("batch_sizes") or grid_batches
        batches = [int(b) for b in wanted if int(b) in grid_batches]
        if not (strategies and batches):
            continue
        out.append(
            rf"^suite\.{paths.asv_class_name(workload, preset)}\.\w+\("
            rf"({_alternatives(frameworks)}), ({_alternatives(strategies)}), "
            rf"({_alternatives(batches)})\)$"
        )
    return out


def capacity_regexes(preset: str, selection: dict[str, list]) -> list[str]:
    """asv --bench regexes for the capacity searches of a run: the selected frameworks and
    strategies of each selected workload's capacity class."""
    p = registry.preset(preset)
    frameworks = selection.get("frameworks") or list(registry.FRAMEWORKS)
    strategies = selection.get("strategies") or list(registry.STRATEGIES)
    return [
        rf"^suite\.{paths.asv_class_name(workload, preset, capacity=True)}\.\w+\("
        rf"({_alternatives(frameworks)}), ({_alternatives(strategies)})\)$"
        for workload in selection.get("workloads") or list(p.sizes)
    ]
