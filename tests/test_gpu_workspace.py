"""The run-time workspace a prediction gets from its other records (analysis.gpu_workspace):
learned per sample of the micro-batch and byte of element, never from its own cell, never
within a budget, never below nothing."""

import pandas as pd
import pytest

from analysis.gpu_workspace import corrected, micro_batch, width

MiB = 2**20


def record(strategy, batch, predicted, measured, framework="torch", limit=-1, workload="unet3d"):
    return {
        "framework": framework, "workload": workload, "device_kind": "NVIDIA H200",
        "strategy": strategy, "batch_size": batch, "limit": limit,
        "allocated_bytes": predicted * MiB, "measured_allocated": measured * MiB,
        "reserved_bytes": predicted * MiB, "measured_reserved": measured * MiB,
    }  # fmt: skip


def test_the_width_and_micro_batch_go_by_the_strategy_s_name():
    assert [width(s) for s in ("baseline", "checkpoint", "tf32", "accumulate-4")] == [4] * 4
    assert [width(s) for s in ("amp-bf16", "amp-bf16-checkpoint", "infer-half")] == [2] * 3
    assert micro_batch("accumulate-4", 8) == 2 and micro_batch("checkpoint", 8) == 8


def test_a_record_gets_the_gap_its_other_cells_show_per_sample_never_its_own():
    v = pd.DataFrame([
        record("baseline", 1, 8000, 9000),  # 1,000 MiB a sample in fp32
        record("baseline", 1, 8000, 9000),  # the same cell again: never its own teacher
        record("checkpoint", 2, 12000, 14000),  # 1,000 a sample
        record("accumulate-4", 16, 20000, 24400),  # 1,100 a sample of its micro-batch of 4
        record("amp-bf16", 2, 4000, 4000),  # 16-bit: another group
    ])  # fmt: skip
    out = corrected(v)
    learned = out["workspace_allocated"] / MiB
    # baseline b1 from the other two cells: the median of 1000/4 and 1100/4 a byte, x 1 x 4
    assert learned[0] == pytest.approx(1050) and out["workspace_from"][0] == 2
    # checkpoint b2 from baseline's two records and accumulate's: median 1000 a sample, x 2
    assert learned[2] == pytest.approx(2000) and out["workspace_from"][2] == 3
    assert learned[3] == pytest.approx(4000)  # 1,000 a sample of the micro-batch of 4
    assert pd.isna(learned[4]) and out["workspace_from"][4] == 0  # no other 16-bit cell
    assert out["allocated_bytes"][4] == 4000 * MiB  # none learned: the prediction as made
    assert out["allocated_bytes"][2] == (12000 + 2000) * MiB
    assert out["allocated_bytes_traced"][2] == 12000 * MiB


def test_a_budget_s_records_neither_teach_nor_learn_and_a_workspace_only_adds():
    v = pd.DataFrame([
        record("baseline", 1, 8000, 9000),
        record("checkpoint", 1, 8000, 9000),
        record("baseline", 2, 16000, 16100, limit=16400 * MiB),  # the device fitted the limit
        record("baseline", 64, 5500, 5000, workload="resnet50"),  # predicted high
        record("checkpoint", 64, 5500, 5400, workload="resnet50"),
    ])  # fmt: skip
    out = corrected(v)
    assert out["workspace_from"][0] == 1  # checkpoint's only: the budget's probe teaches nothing
    assert out["workspace_from"][2] == 0 and out["allocated_bytes"][2] == 16000 * MiB
    assert out["workspace_allocated"][3] == 0  # a negative gap is no workspace
    assert out["allocated_bytes"][3] == 5500 * MiB
