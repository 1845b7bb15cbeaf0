"""What the committed CPU run of the U-Net and the Transformer must show (real runs, as data)."""

import json
import re
from pathlib import Path

import pytest

from membench import registry
from membench.records import Record, RecordStore

from .conftest import REPO

WORKLOADS = ("unet3d", "transformer")
FRAMEWORKS = ("torch", "jax", "jittor")
# Strategies added after the committed runs: the next CPU run records them.
ADVICE = (
    "infer-grad", "two-models-resident", "two-models-sequential", "host-data", "hygiene-2",
    "infer-varlen",
)  # fmt: skip
ADDED_AFTER_THE_RUNS = (
    "fused-attention-bf16", "tf32",  # GPU paths
    *ADVICE,  # the advice under test: measured for ResNet-50 and the Transformer (below)
    *registry.SHARDING_STRATEGIES,  # measured in the cpu-shard preset, at two ranks
)  # fmt: skip


def strategies_run(framework: str) -> list[str]:
    """The strategies a committed run covers. Jittor's own levers (fusion off, its allocators)
    are refused by torch and JAX (tested with their backends), and their run predates them;
    the accumulation modes besides the loop (scan, sync) postdate every committed run."""
    known = [
        n
        for n, s in registry.STRATEGIES.items()
        if n not in ADDED_AFTER_THE_RUNS and s.accumulate_mode == "loop"
    ]
    if framework == "jittor":
        return known
    return [
        name
        for name in known
        if (s := registry.STRATEGIES[name]).fusion
        and s.allocator not in registry.SWAPPING_ALLOCATORS
    ]


def cpu_stores() -> list[Path]:
    """The cpu preset's committed stores (cpu-<commit>; not cpu-eval's or cpu-shard's)."""
    root = REPO / "results" / "records"
    return sorted(p for p in root.glob("*/cpu-*") if re.fullmatch(r"cpu-[0-9a-f]{12}", p.name))


def stores(workload: str = WORKLOADS[0]) -> list[Path]:
    """The committed CPU runs that measured this workload."""
    return [p for p in cpu_stores() if any(p.glob(f"{workload}--*.json"))]


def _named(inputs: dict) -> str:
    return json.dumps(inputs, sort_keys=True)


def cells(store: Path, workload: str) -> dict[tuple[str, str, int], Record]:
    return {
        (r.cell.framework, r.cell.strategy, r.cell.batch_size): r
        for r in RecordStore(store).records()
        if r.cell.workload == workload
    }


@pytest.mark.parametrize("workload", WORKLOADS)
def test_cpu_runs_of_both_workloads_are_committed_for_every_framework(workload):
    found = {r.cell.framework for store in stores(workload) for r in RecordStore(store).records()}
    assert set(FRAMEWORKS) <= found, (
        f"{workload}: no committed CPU run for {set(FRAMEWORKS) - found}"
    )


def _refused(record: Record) -> bool:
    return record.status == "unsupported" and record.environment.get("refused_at") == "plan"


def _inputs(found: dict) -> set[str]:
    return {_named(r.environment["workload_inputs"]) for r in found.values() if r.status == "ok"}


@pytest.mark.parametrize("workload", WORKLOADS)
def test_each_run_names_one_configuration_and_says_why_a_cell_did_not_run(workload):
    for store in stores(workload):
        found = cells(store, workload)
        # one configuration per run, named in every record it measured; a run of refusals
        # alone (a strategy the workload cannot run) measured none
        assert len(_inputs(found)) == 1 or all(_refused(r) for r in found.values())
        for r in found.values():
            assert r.status == "ok" or r.reason
            if r.status == "ok":
                assert r.step_times and r.metrics["peak_host_rss_bytes"] > 0


@pytest.mark.parametrize("workload", WORKLOADS)
def test_the_runs_of_the_preset_as_it_stands_cover_every_cell(workload):
    # A later run may re-measure or add a selection of cells: together, the runs measured
    # at the preset's configuration cover every framework x strategy x batch of it.
    size = registry.preset("cpu").size(workload)
    current = [
        found for s in stores(workload)
        if _inputs(found := cells(s, workload)) == {_named(size.inputs)}
    ]  # fmt: skip
    assert current, f"no committed {workload} run at the cpu preset's configuration"
    covered = {key for found in current for key in found}
    # a refusal at plan time is one at every configuration
    covered |= {k for s in stores(workload) for k, r in cells(s, workload).items() if _refused(r)}
    expected = {
        (f, s, b) for f in FRAMEWORKS for s in strategies_run(f) for b in size.batch_sizes
    }  # fmt: skip
    assert expected <= covered, sorted(expected - covered)


@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_inference_needs_less_memory_than_training(workload, framework):
    compared = 0  # within a run (a store); a store may re-measure a few strategies only
    for store in stores(workload):
        found = cells(store, workload)
        for b in {b for f, _, b in found if f == framework}:
            if (framework, "baseline", b) not in found or (framework, "infer", b) not in found:
                continue
            train, infer = found[(framework, "baseline", b)], found[(framework, "infer", b)]
            assert train.status == infer.status == "ok"
            assert infer.metrics["peak_host_rss_bytes"] < train.metrics["peak_host_rss_bytes"]
            compared += 1
    assert compared >= 1


def test_the_attention_knob_is_refused_where_there_is_no_attention():
    for store in stores():
        for (framework, strategy, _), r in cells(store, "unet3d").items():
            if strategy == "fused-attention":
                assert r.status == "unsupported" and "no attention layer" in r.reason, framework


@pytest.mark.parametrize("workload", ["resnet50", "transformer"])
def test_the_advice_under_test_is_committed_for_every_framework(workload):
    size = registry.preset("cpu").size(workload)
    found = {
        (r.cell.framework, r.cell.strategy, r.cell.batch_size): r
        for store in cpu_stores()
        for r in RecordStore(store).records()
        if r.cell.workload == workload and r.cell.strategy in ADVICE
    }
    expected = {(f, s, b) for f in FRAMEWORKS for s in ADVICE for b in size.batch_sizes}
    assert expected <= found.keys(), sorted(expected - found.keys())
    for key, r in found.items():
        assert r.status == "ok" or r.reason, key
        if key[1] in ("two-models-resident", "two-models-sequential", "host-data", "hygiene-2"):
            assert r.status == "ok", (key, r.reason)  # every framework runs these
