"""What the committed CPU results must show (they are real runs, checked here as data)."""

import re
from collections import defaultdict
from pathlib import Path

import pytest

from membench.records import RecordStore

from .conftest import REPO

# The cpu preset's stores (cpu-<commit>), not the eval probe's (cpu-eval-<commit>).
STORES = sorted(
    p
    for p in (REPO / "results" / "records").glob("*/cpu-*")
    if p.is_dir() and re.fullmatch(r"cpu-[0-9a-f]{12}", p.name)
)


def peaks(store: Path, framework: str) -> dict[int, dict[str, float]]:
    table: dict[int, dict[str, float]] = defaultdict(dict)
    for r in RecordStore(store).records():
        if r.cell.workload == "resnet50" and r.cell.framework == framework and r.status == "ok":
            table[r.cell.batch_size][r.cell.strategy] = r.metrics["peak_host_rss_bytes"]
    return table


def stores_with(framework: str) -> list[Path]:
    return [s for s in STORES if any(s.glob(f"resnet50--{framework}--*.json"))]


def test_a_cpu_run_is_committed():
    assert STORES, "results/records/<cpu machine>/cpu-<commit>/ holds the committed CPU run"
    assert stores_with("torch") and stores_with("jax") and stores_with("jittor")


def test_torch_checkpoint_needs_less_memory_than_training():
    # (On XLA:CPU remat does not lower memory: that JAX result is reported, not asserted.)
    # Compared within a store (one run); a store may re-measure a few strategies only.
    compared = 0
    for store in stores_with("torch"):
        for batch, peak in peaks(store, "torch").items():
            if {"baseline", "checkpoint"} <= peak.keys():
                assert peak["checkpoint"] < peak["baseline"], (store, batch, peak)
                compared += 1
    assert compared >= 2


@pytest.mark.parametrize("framework", ["torch", "jax", "jittor"])
def test_inference_needs_less_memory_than_training(framework):
    compared = 0
    for store in stores_with(framework):
        for batch, peak in peaks(store, framework).items():
            if {"baseline", "infer"} <= peak.keys():
                assert peak["infer"] < peak["baseline"], (store, batch, peak)
                compared += 1
    assert compared >= 2


@pytest.mark.parametrize("store", STORES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_record_reads_whole_and_says_why_when_not_ok(store):
    records = list(RecordStore(store).records())
    assert records
    for r in records:
        if r.status == "ok":
            assert r.step_times and r.metrics["peak_host_rss_bytes"] > 0
        else:
            assert r.reason


@pytest.mark.parametrize("store", STORES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_jax_cell_carries_xla_static_analysis(store):
    for r in RecordStore(store).records():
        if r.cell.framework == "jax" and r.status == "ok":
            for name in ["xla_temp_bytes", "xla_argument_bytes", "xla_output_bytes", "xla_flops"]:
                assert r.metrics[name] >= 0, (r.cell, name)
        if r.cell.framework == "jax" and r.cell.strategy == "compile":
            assert r.status == "unsupported" and "always runs the step compiled" in r.reason


def test_every_jittor_record_says_how_jittor_ran():
    ran = 0
    records = [r for store in stores_with("jittor") for r in RecordStore(store).records()]
    for r in records:
        if r.cell.framework != "jittor" or r.status != "ok" or r.cell.workload != "resnet50":
            continue
        ran += 1
        env = r.environment
        assert env["onednn"] is True, r.cell  # convolutions on oneDNN, not generic kernels
        assert env["torch_in_process"] is False and env["env_set_by_strategy"]["nvcc_path"] == ""
        assert r.metrics["trainable_parameters"] == 25_557_032
        assert r.metrics["jittor_cpu_reserved_bytes"] > 0
    assert ran >= 4


SHARD_STORES = sorted((REPO / "results" / "records").glob("*/cpu-shard-*"))


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_fsdp_ranks_each_hold_their_share_of_the_model_state(framework):
    # ZeRO-3 at W ranks: (params + grads + optimizer state) / W per rank, within 10%
    checked = 0
    for store in SHARD_STORES:
        found = {(r.cell.workload, r.cell.strategy): r for r in RecordStore(store).records()
                 if r.cell.framework == framework and r.status == "ok"}  # fmt: skip
        for (workload, strategy), r in found.items():
            base = found.get((workload, "baseline"))
            if strategy != "fsdp" or base is None:
                continue
            share = base.metrics["analytic_floor_bytes"] / r.cell.world_size
            held = r.metrics["model_state_bytes_max_over_ranks"]
            assert abs(held / share - 1) <= 0.10, (workload, held, share)
            checked += 1
    assert checked >= 2, f"no committed {framework} fsdp cells beside their baseline"
