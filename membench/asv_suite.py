"""What asv runs: one benchmark class per workload, parametrized from the registry.

One worker run per cell serves all its metrics: the first track_ method that needs a
cell measures it through the runner and stores the Record; every other track_ method of
that cell reads the stored Record. A cell that did not end `ok` raises NotImplementedError
in setup, which asv shows as n/a (its status and reason stay in the Record). A metric that
does not exist on this device (GPU allocator peaks on a CPU host) is n/a as well.

Selection comes from the environment so that `asv run` and `membench bench` agree:
MEMBENCH_PRESET (default: from the device), MEMBENCH_WORKLOADS, MEMBENCH_FRAMEWORKS,
MEMBENCH_STRATEGIES, MEMBENCH_BATCH_SIZES (comma-separated), MEMBENCH_WORLD_SIZE, MEMBENCH_STORE.
A cell of W > 1 ranks carries them in its strategy parameter, `fsdp@w2`: one-rank cells keep
the parameters they always had, so committed results still load.
"""

from __future__ import annotations

import os
from pathlib import Path

from membench import paths, registry, runner
from membench.environment import default_preset, git_commit, machine_name
from membench.metrics import ASV_METRICS, ASV_SAMPLES, METRICS, Metric
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
    return registry.preset(default_preset()).name


def default_store(preset: str) -> Path:
    """This machine's records of a preset at this commit, committed beside asv's results."""
    return paths.preset_store(machine_name(), preset, str(git_commit()["commit"]))


def active_stack() -> Stack | None:
    """The framework version of this environment, when asv runs the version matrix."""
    spec = os.environ.get("MEMBENCH_STACK", "")
    return parse_stack(spec) if spec.strip() else None


def suite_store() -> RecordStore:
    raw = os.environ.get("MEMBENCH_STORE")
    root = Path(raw) if raw else default_store(suite_preset())
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


def params_for(workload: str) -> list[list]:
    preset = registry.preset(suite_preset())
    raw_batches = os.environ.get("MEMBENCH_BATCH_SIZES", "")
    batches = [int(b) for b in raw_batches.split(",") if b.strip()] or list(
        preset.size(workload).batch_sizes
    )
    strategies = _selected("MEMBENCH_STRATEGIES", list(preset.strategies or registry.STRATEGIES))
    return [selected_frameworks(), [strategy_param(s, preset) for s in strategies], batches]


def strategy_param(name: str, preset: registry.Preset) -> str:
    """The strategy parameter of a cell: its name, with @wW where it runs on W > 1 ranks."""
    override = int(os.environ.get("MEMBENCH_WORLD_SIZE") or 0) or None
    ranks = registry.world_size_of(registry.strategy(name), preset, override)
    return name if ranks == 1 else f"{name}{RANKS_MARK}{ranks}"


# Set when asv records a cluster run for one of its machines: only cells that machine measured
# count, and nothing is measured here (a missing cell is n/a, not a local measurement).
RECORDS_OF = "MEMBENCH_RECORDS_OF"


def cell_record(workload: str, framework: str, strategy: str, batch_size: int) -> Record:
    """The cell's stored Record, measuring it first if no run has yet."""
    name, ranks = parse_strategy_param(strategy)
    cell = Cell(workload, framework, name, int(batch_size), suite_preset(), ranks)
    # asv's grid is a product; the preset may leave some of its cells to another (n/a here)
    if reason := runner.left_to_another(cell, selected_workloads()):
        raise NotImplementedError(f"left to another preset: {reason}")
    machine = os.environ.get(RECORDS_OF)
    if machine:
        record = suite_store().get(cell)
        if record is None or record.environment.get("machine") != machine:
            raise NotImplementedError(f"not measured on {machine}")
        return record
    return runner.run([cell], suite_store(), retry_failed=False).records[0]


class WorkloadBenchmarks:
    """Base of the per-workload asv classes (not itself collected: it has no workload)."""

    workload = ""
    param_names = ["framework", "strategy", "batch_size"]
    # asv's limit on one benchmark run (wall clock under its fork server): far above any
    # cell's own limit, which the runner enforces and records
    timeout = 3600.0
    version = SUITE_VERSION

    def setup(self, framework: str, strategy: str, batch_size: int) -> None:
        record = cell_record(self.workload, framework, strategy, batch_size)
        if record.status != "ok":
            raise NotImplementedError(f"{record.status}: {record.reason}")
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
    """One asv class per selected workload, named after it."""
    classes = {}
    for name in selected_workloads():
        registry.workload(name)
        cls_name = paths.asv_class_name(name)
        classes[cls_name] = type(
            cls_name,
            (WorkloadBenchmarks,),
            {"workload": name, "params": params_for(name)},
        )
    return classes


def capacity_file() -> Path | None:
    """MEMBENCH_CAPACITY_FILE, else the newest capacity search of this commit and preset."""
    raw = os.environ.get("MEMBENCH_CAPACITY_FILE")
    if raw:
        return Path(raw)
    found = paths.capacity_files(
        machine=machine_name(), preset=suite_preset(), commit=str(git_commit()["commit"])
    )
    found.sort(key=os.path.getmtime)
    return found[-1] if found else None


class CapacityBenchmarks:
    """Base of the per-workload capacity classes: they read `membench capacity`'s results
    (a search is many fresh processes; asv only records it)."""

    workload = ""
    param_names = ["framework", "strategy"]
    version = SUITE_VERSION

    def setup(self, framework: str, strategy: str) -> None:
        path = capacity_file()
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
    """One capacity class per selected workload: Resnet50Capacity, ..."""
    classes = {}
    for name in selected_workloads():
        cls_name = paths.asv_class_name(name) + "Capacity"
        params = [
            selected_frameworks(),
            _selected("MEMBENCH_STRATEGIES", list(registry.STRATEGIES)),
        ]
        classes[cls_name] = type(
            cls_name, (CapacityBenchmarks,), {"workload": name, "params": params}
        )
    return classes
