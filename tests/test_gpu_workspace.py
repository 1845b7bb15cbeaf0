"""The run-time workspace a prediction gets from its other records (analysis.gpu_workspace):
learned per sample and byte of element, never from its own cell, kept within a limit."""

import pandas as pd
import pytest

from analysis.gpu_workspace import corrected, width

MiB = 2**20


def record(strategy, batch, predicted, measured, framework="torch", limit=-1, workload="unet3d"):
    return {
        "framework": framework, "workload": workload, "device_kind": "NVIDIA H200",
        "strategy": strategy, "batch_size": batch, "limit": limit,
        "allocated_bytes": predicted * MiB, "measured_allocated": measured * MiB,
        "reserved_bytes": predicted * MiB, "measured_reserved": measured * MiB,
    }  # fmt: skip


def test_the_width_goes_by_the_strategy_s_precision():
    assert [width(s) for s in ("baseline", "checkpoint", "tf32", "accumulate-4")] == [4] * 4
    assert [width(s) for s in ("amp-bf16", "amp-bf16-checkpoint", "infer-half")] == [2] * 3


def test_a_record_gets_the_gap_its_other_cells_show_per_sample_never_its_own():
    v = pd.DataFrame([
        record("baseline", 1, 8000, 9000),  # 1,000 MiB a sample in fp32
        record("baseline", 1, 8000, 9000),  # the same cell again: never its own teacher
        record("checkpoint", 2, 12000, 14000),  # 1,000 a sample
        record("checkpoint", 4, 20000, 24400),  # 1,100 a sample
        record("amp-bf16", 2, 4000, 4000),  # 16-bit: another group
    ])  # fmt: skip
    out = corrected(v, ("jax",))
    learned = out["workspace_allocated"] / MiB
    # baseline b1 from checkpoint's two cells: medians of 1000/4 and 1100/4 a byte, x 1 x 4
    assert learned[0] == pytest.approx(1050) and out["workspace_from"][0] == 2
    # checkpoint b2 from baseline's two records and checkpoint b4: median 1000 a sample, x 2
    assert learned[2] == pytest.approx(2000) and out["workspace_from"][2] == 3
    assert pd.isna(learned[4]) and out["workspace_from"][4] == 0  # no other 16-bit cell
    assert out["allocated_bytes"][4] == 4000 * MiB  # none learned: the prediction as made
    assert out["allocated_bytes"][2] == (12000 + 2000) * MiB
    assert out["allocated_bytes_traced"][2] == 12000 * MiB


def test_a_reserve_stays_within_its_limit_and_a_compiler_s_budget_records_stay_apart():
    v = pd.DataFrame([
        record("baseline", 1, 8000, 9000),
        record("baseline", 2, 16000, 16500, limit=16400 * MiB),  # torch, capped
        record("baseline", 64, 5000, 5500, framework="jax", workload="resnet50"),
        record("baseline", 256, 20000, 22000, framework="jax", workload="resnet50"),
        record("baseline", 300, 18000, 23000, framework="jax", workload="resnet50",
               limit=24000 * MiB),  # XLA fits its autotuning to the limit
    ])  # fmt: skip
    out = corrected(v, ("jax",))
    assert out["reserved_bytes"][1] == 16400 * MiB  # 16,000 + 2 x 1,000 capped at the limit
    assert out["allocated_bytes"][1] == 18000 * MiB  # the allocated peak is no reserve
    assert out["workspace_from"][2] == 1  # from b256 only: the budget's probe teaches nothing
    assert out["workspace_from"][4] == 0 and out["allocated_bytes"][4] == 18000 * MiB
