"""Sharded data parallelism: W-rank cells, their records, the memory model's ZeRO terms, and
one step under every sharding strategy equal to the single-process step on the global batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from membench import registry
from membench.backends import BuildSpec, cell_ranks_refusal
from membench.backends.jax_backend.sharding import host_devices_env
from membench.cells import planning, supervision
from membench.measure import distributed
from membench.memory.memory_model import predict
from membench.publish.asv_suite import strategy_param
from membench.records import Cell, Record, parse_strategy_param, write_json_atomic
from models.transformer.spec import trainable_parameters
from tests.conftest import REPO
from tests.sharded_step import JAX, TORCH

# fp32: the sharded step sums the same gradients in another order. AdamW's first step moves
# each weight by lr x g / (|g| + eps): where |g| is near eps (the key projection's bias, whose
# gradient is zero up to rounding), rounding noise moves the weight by up to 2.5e-6 (measured,
# JAX dp). So: every weight within 1% of the learning rate (6e-4), and all but 0.1% of them
# within fp32's 1e-6. A rank that skipped the all-reduce misses by ~lr on most weights.
RTOL, ATOL, STEP_ATOL, LOOSE_SHARE = 1e-5, 1e-6, 6e-6, 1e-3


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("steps")
    cmd = [sys.executable, "-m", "tests.sharded_step", "baseline", str(out)]
    subprocess.run(cmd, check=True, env=_env(), cwd=REPO, timeout=300)
    return out, dict(np.load(out / "torch-baseline.npz"))


def _assert_same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    loose = total = 0
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=RTOL, atol=STEP_ATOL, err_msg=name)
        loose += int((~np.isclose(got[name], value, rtol=RTOL, atol=ATOL)).sum())
        total += value.size
    assert loose / total < LOOSE_SHARE


def test_torch_sharded_steps_equal_the_one_process_step(reference):
    out, want = reference
    cmd = lambda rank: [sys.executable, "-m", "tests.sharded_step", "torch", str(out)]  # noqa: E731
    with open(out / "ranks.log", "w") as log:
        procs = distributed.launch_ranks(cmd, _env(), 2, log)
        rcs, killed = distributed.wait_ranks(procs, timeout=300)
    assert (rcs, killed) == ([0, 0], ""), (out / "ranks.log").read_text()[-3000:]
    for name in TORCH:
        _assert_same(dict(np.load(out / f"torch-{name}.npz")), want)


def test_jax_sharded_steps_equal_the_one_device_step(tmp_path):
    env = {**_env(), **host_devices_env(2, {})}
    cmd = [sys.executable, "-m", "tests.sharded_step", "jax", str(tmp_path)]
    subprocess.run(cmd, check=True, env=env, cwd=REPO, timeout=300)
    want = dict(np.load(tmp_path / "jax-baseline.npz"))
    for name in JAX:
        _assert_same(dict(np.load(tmp_path / f"jax-{name}.npz")), want)


def test_a_torch_fsdp_cell_records_each_rank_and_its_sharded_state(store):
    cell = Cell("transformer", "torch", "fsdp", 4, "smoke", world_size=2)
    record = supervision.run([cell], store).records[0]
    assert record.status == "ok", record.reason
    assert len(record.ranks) == 2
    m = record.metrics
    # each rank's peak, and their max and sum under names that say so: no plain peak
    peaks = [r["peak_host_rss_bytes"] for r in record.ranks]
    assert m["peak_host_rss_bytes_max_over_ranks"] == max(peaks)
    assert m["peak_host_rss_bytes_sum_over_ranks"] == sum(peaks)
    assert "peak_host_rss_bytes" not in m
    # ZeRO-3: each rank holds half of params + grads + AdamW's two moments
    whole = 16 * trainable_parameters(registry.TRANSFORMER_TINY)  # 4 bytes x (1 + 1 + 2)
    assert [r["model_state_bytes"] for r in record.ranks] == [whole / 2, whole / 2]
    assert m["predicted_model_state_bytes"] == whole / 2
    assert store.path(cell).name.endswith("--bs4--w2.json")


def _spec(strategy: str, world: int, batch: int = 4) -> BuildSpec:
    size = registry.preset("smoke").size("transformer")
    return BuildSpec("transformer", registry.strategy(strategy), size, batch, world_size=world)


def test_world_size_must_fit_the_strategy_and_batch():
    assert "needs a world size above 1" in cell_ranks_refusal(_spec("fsdp", 1))
    assert "does not shard" in cell_ranks_refusal(_spec("baseline", 2))
    assert "does not split evenly" in cell_ranks_refusal(_spec("ddp", 2, batch=3))
    assert cell_ranks_refusal(_spec("ddp", 2)) is None


def test_plan_gives_ranks_to_sharding_strategies_only():
    cells = planning.cells_for(["transformer"], ["torch"], ["baseline", "fsdp"], "cpu-shard")
    assert [(c.strategy, c.world_size) for c in cells] == [("baseline", 1), ("fsdp", 2)]
    cells = planning.cells_for(["transformer"], ["torch"], ["fsdp"], "smoke", world_size=4)
    assert cells[0].world_size == 4


def test_one_rank_cells_keep_their_keys_and_records():
    cell = Cell("resnet50", "torch", "baseline", 2, "smoke")
    assert cell.key == "resnet50--torch--baseline--bs2"
    assert "world_size" not in Record(cell, "ok").to_dict()["cell"]
    assert "ranks" not in Record(cell, "ok").to_dict()
    ranked = Cell("resnet50", "torch", "ddp", 2, "smoke", 2)
    assert Record.from_dict(Record(ranked, "ok", ranks=[{"a": 1.0}]).to_dict()).cell == ranked


def test_asv_strategy_parameter_carries_ranks_above_one():
    preset = registry.preset("cpu-shard")
    assert strategy_param("baseline", preset) == "baseline"
    assert strategy_param("fsdp", preset) == "fsdp@w2"
    assert parse_strategy_param("fsdp@w2") == ("fsdp", 2)
    assert parse_strategy_param("baseline") == ("baseline", 1)


def test_summary_names_max_and_sum_and_takes_the_slowest_rank():
    ranks = [
        {"peak_host_rss_bytes": 100.0, "step_seconds_median": 0.5, "xla_flops": 7.0},
        {"peak_host_rss_bytes": 300.0, "step_seconds_median": 1.0, "xla_flops": 7.0},
    ]
    out = distributed.summarise_ranks(ranks, global_batch=8)
    assert out["peak_host_rss_bytes_max_over_ranks"] == 300.0
    assert out["peak_host_rss_bytes_sum_over_ranks"] == 400.0
    assert out["step_seconds_median"] == 1.0
    assert out["throughput_samples_per_second"] == 8.0
    assert out["xla_flops"] == 7.0


def test_the_rank_that_failed_names_the_cell_status():
    cell = Cell("transformer", "torch", "ddp", 4, "smoke", 2)
    stopped = Record(cell, "error", "stopped", environment={"stopped_by_runner": True})
    merged = distributed.merge_ranks(cell, [stopped, Record(cell, "oom", "out of memory")])
    assert (merged.status, merged.reason) == ("oom", "rank 1 of 2: out of memory")


def test_a_rank_left_waiting_is_killed_after_the_grace_period(tmp_path):
    scripts = ["import sys; sys.exit(3)", "import time; time.sleep(60)"]
    cmd = lambda rank: [sys.executable, "-c", scripts[rank]]  # noqa: E731
    with open(tmp_path / "log", "w") as log:
        procs = distributed.launch_ranks(cmd, os.environ, 2, log)
        rcs, killed = distributed.wait_ranks(procs, timeout=30, grace=0.5)
    assert rcs == [3, None]
    assert killed.startswith("stopped")
    assert all(p.returncode is not None for p in procs)  # reaped: nothing left behind


def test_rank_env_shares_the_cores_unless_set():
    env = distributed.rank_env(1, 2, 1234, {})
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_PORT"]) == ("1", "2", "1234")
    assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))
    assert distributed.rank_env(0, 2, 1, {"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "3"


def test_host_devices_flag_replaces_an_earlier_count():
    env = host_devices_env(2, {"XLA_FLAGS": "--a --xla_force_host_platform_device_count=8"})
    assert env["XLA_FLAGS"] == "--a --xla_force_host_platform_device_count=2"


@pytest.mark.parametrize(
    ("strategy", "params", "grads", "state", "gathered"),
    [
        ("ddp", 1.0, 1.0, 2.0, 0.0),
        ("zero1", 1.0, 1.0, 1.0, 0.0),
        ("fsdp-zero2", 0.5, 0.5, 1.0, 1.0),
        ("fsdp", 0.5, 0.5, 1.0, None),
    ],
)
def test_memory_model_divides_model_state_by_zero_stage(strategy, params, grads, state, gathered):
    from models.transformer import spec

    inputs = registry.TRANSFORMER_SHARD
    p = 4.0 * spec.trainable_parameters(inputs)  # fp32 bytes; AdamW holds 2 of them
    got = predict("transformer", registry.strategy(strategy), 4, inputs, world_size=2)
    one = predict("transformer", registry.strategy("baseline"), 2, inputs)
    assert (got.parameters, got.gradients, got.optimizer_state) == (
        params * p, grads * p, state * p,
    )  # fmt: skip
    largest_unit = 4.0 * max(spec.shard_unit_parameters(inputs))  # the root: embeddings
    assert got.gathered_parameters == (largest_unit if gathered is None else gathered * p)
    assert got.activations == one.activations  # each rank steps on half the global batch


def _rows(record: Record, path: Path) -> list[dict]:
    from analysis.loader import record_rows

    write_json_atomic(path, record.to_dict())
    return record_rows(record, path)


def test_the_sharding_table_sets_the_busiest_rank_beside_the_unsharded_state(tmp_path):
    import pandas as pd

    from analysis.fits import cell_predictions, sharded_model_state
    from analysis.loader import latest
    from analysis.schema import COLUMNS

    whole = 16_000_000.0
    # every record holds a one-device prediction, as the worker writes it
    env = {"machine": "m", "device": "cpu", "prediction": {"mode": "train"}}
    judged = {"peak_host_rss_bytes": 9e8, "memory_prediction_error_spec_only": -0.5}
    base = Record(Cell("transformer", "torch", "baseline", 4, "cpu-shard"), "ok",
                  metrics={"analytic_floor_bytes": whole, **judged}, environment=env)  # fmt: skip
    fsdp = {
        w: Record(
            Cell("transformer", "torch", "fsdp", 4, "cpu-shard", world_size=w),
            "ok",
            metrics={
                "model_state_bytes_max_over_ranks": whole / w * 1.05,
                **judged,  # one process's peak, as JAX's for its W devices
                "predicted_model_state_bytes": whole / w,
                "model_state_prediction_error": 1 / 1.05 - 1,
            },
            environment=env,
            started_at=f"2026-01-0{w}",
        )  # fmt: skip
        for w in (2, 4)
    }
    rows = _rows(base, tmp_path / "b.json")
    rows += [r for w, x in fsdp.items() for r in _rows(x, tmp_path / f"f{w}.json")]
    view = latest(pd.DataFrame(rows, columns=COLUMNS))
    table = sharded_model_state(view).set_index("world_size")
    # both world sizes survive latest(): W is part of a cell
    assert list(table.index) == [2, 4]
    assert table.loc[2, "share_of_unsharded"] == pytest.approx(0.525)
    assert table.loc[4, "share_of_unsharded"] == pytest.approx(0.2625)
    assert table.loc[4, "one_over_w"] == 0.25
    assert table.loc[2, "predicted_mib"] == pytest.approx(whole / 2 / 2**20)
    # the one-device peak model judges the one-rank cell only
    assert len(cell_predictions(view)) == 1
