"""The claims table: verdicts computed from small frames built here, and from the committed run."""

import math

import pandas as pd
import pytest

from analysis.claims import (
    CLAIMS,
    CONFIRMED,
    GPU_REASON,
    INCONCLUSIVE,
    NOT_MEASURABLE,
    REFUTED,
    TABLE_COLUMNS,
    VERDICTS,
    claims_table,
)
from analysis.schema import COLUMNS, METRICS

from .conftest import REPO

H100 = "NVIDIA H100 80GB HBM3"
MIB = 2**20
HOST = ["peak_host_rss_bytes", "peak_host_rss_delta_bytes"]
GPU_CLAIMS = ["C1", "C2", "C3", "C4", "C5", "C7", "C11", "C12"]


def row(strategy, batch, metric, value, *, device="cpu", framework="torch",
        workload="resnet50", status="ok", world_size=1):  # fmt: skip
    """One tidy row with every schema column; the machine and preset follow the device."""
    kind = "cpu" if device == "cpu" else "gpu"
    values = {
        "source": "record", "machine": f"{kind}-test", "device": device, "host_cpu": "",
        "framework": framework, "framework_version": "", "environment": "default", "python": "",
        "workload": workload, "strategy": strategy, "mode": "",
        "batch_size": batch, "world_size": world_size, "preset": kind, "inputs": "",
        "commit": "c0",
        "started_at": "2026-01-01T00:00:00+00:00", "status": status, "reason": "",
        "metric": metric, "layer": METRICS[metric].layer, "value": value,
        "unit": METRICS[metric].unit, "spread_low": math.nan, "spread_high": math.nan,
        "n_samples": 1, "path": "",
    }  # fmt: skip
    return [values[c] for c in COLUMNS]


def memory(per_sample_mib, batches=(2, 4, 8), metrics=HOST, **kw):
    """{strategy: MiB per sample}: rows whose ratios between strategies are the same at
    every batch size."""
    return [
        row(strategy, b, m, mib * b * MIB, **kw)
        for strategy, mib in per_sample_mib.items()
        for b in batches
        for m in metrics
    ]


def frame(*row_lists):
    return pd.DataFrame([r for rows in row_lists for r in rows], columns=COLUMNS)


def claim(table, claim_id):
    return table.set_index("id").loc[claim_id]


@pytest.mark.parametrize(
    "ratio, verdict", [(0.5, CONFIRMED), (0.9, REFUTED), (0.65, INCONCLUSIVE), (0.2, REFUTED)]
)
def test_c9_verdict_follows_the_measured_ratio(ratio, verdict):
    c9 = claim(claims_table(frame(memory({"infer": 100, "infer-half": 100 * ratio}))), "C9")
    assert c9.verdict == verdict
    assert c9.device == "cpu"
    assert f"{ratio:.2f}x" in c9.measured and "(cpu)" in c9.measured
    assert "0.40x..0.60x" in c9.reason  # the tolerance is said


def test_batches_on_both_sides_of_the_claim_are_inconclusive():
    # Median 0.5 (confirmed), but one batch at 0.9: the median alone would hide it.
    half = {2: 0.5, 4: 0.5, 8: 0.9}
    rows = [row("infer", b, m, 100.0 * b) for b in half for m in HOST]
    rows += [row("infer-half", b, m, 100.0 * b * r) for b, r in half.items() for m in HOST]
    c9 = claim(claims_table(frame(rows)), "C9")
    assert c9.verdict == INCONCLUSIVE
    assert "batches disagree" in c9.reason


def runtime(mib, strategies, batches=(2, 4, 8)):
    """The RSS after the framework's import, the same in every cell."""
    return [
        row(s, b, "host_rss_after_import_bytes", mib * MIB) for s in strategies for b in batches
    ]


def test_layers_that_disagree_are_inconclusive():
    rows = memory({"infer": 100, "infer-half": 50}, metrics=["peak_host_rss_delta_bytes"])
    rows += memory({"infer": 100, "infer-half": 90}, metrics=["peak_host_rss_bytes"])
    rows += runtime(0, ["infer", "infer-half"])
    c9 = claim(claims_table(frame(rows)), "C9")
    assert c9.verdict == INCONCLUSIVE and "the layers of 'memory' disagree" in c9.reason


def test_a_cpu_judges_memory_above_the_frameworks_runtime_not_the_process_peak():
    """The committed Intel host's case: half() halves what the step adds and what the model
    holds, but 230 MiB of libraries loaded at import sit in both peaks and pull the process
    ratio to 0.8. The runtime is no strategy's memory, as a GPU's allocator does not count
    the CUDA context: the peak above it is judged, the process peak is not a layer."""
    held = {"infer": 100, "infer-half": 52}
    rows = memory(held, metrics=["peak_host_rss_delta_bytes"])
    rows += [row(s, b, "peak_host_rss_bytes", (230 + mib * b) * MIB)
             for s, mib in held.items() for b in (2, 4, 8)]  # fmt: skip
    rows += runtime(230, held)
    c9 = claim(claims_table(frame(rows)), "C9")
    assert c9.verdict == CONFIRMED, c9.reason
    assert "peak RSS - RSS after import), ratio: 0.52x" in c9.measured
    assert "peak host RSS" not in c9.measured
    assert "judged on PyTorch's ResNet-50" in c9.reason
    # without the runtime's figure (records older than it) the process peak stands in,
    # named as such: 0.8x, so the two layers disagree
    c9 = claim(claims_table(frame(rows[: -len(runtime(230, held))])), "C9")
    assert c9.verdict == INCONCLUSIVE and "after import" not in c9.measured
    assert "peak host RSS, ratio: 0.70x" in c9.measured  # (230 + 52b) / (230 + 100b)


def test_gpu_claim_with_only_cpu_data_shows_the_cpu_figure_without_a_verdict():
    c1 = claim(claims_table(frame(memory({"baseline": 100, "amp-bf16": 60}))), "C1")
    assert c1.verdict == NOT_MEASURABLE
    assert c1.reason.startswith(GPU_REASON)
    assert c1.device == "cpu"
    assert "40%" in c1.measured and "(cpu)" in c1.measured


@pytest.mark.parametrize("amp_mib, verdict", [(60, CONFIRMED), (90, REFUTED)])
def test_the_same_gpu_claim_with_gpu_rows_gets_a_verdict(amp_mib, verdict):
    gpu = memory({"baseline": 100, "amp-bf16": amp_mib}, metrics=["peak_device_allocated_bytes"],
                 device=H100)  # fmt: skip
    cpu = memory({"baseline": 100, "amp-bf16": 99})  # would refute: must not count
    c1 = claim(claims_table(frame(gpu, cpu)), "C1")
    assert c1.verdict == verdict
    assert c1.device == H100
    assert "(cpu)" not in c1.measured and "device allocated peak" in c1.measured


def test_missing_framework_workload_or_strategy_is_named():
    rows = memory({"baseline": 100}, metrics=["peak_device_allocated_bytes"], device=H100,
                  workload="unet3d")  # fmt: skip
    table = claims_table(frame(rows))
    c3 = claim(table, "C3")
    assert c3.verdict == NOT_MEASURABLE and "no jittor results" in c3.reason
    assert "no transformer workload results" in claim(table, "C2").reason
    assert "the claimed combination is not one cell" in claim(table, "C5").reason
    assert "Flux.jl is not available" in claim(table, "C11").reason


def test_sharding_is_shown_against_ddp_at_the_same_ranks_never_judged():
    per_rank = ["peak_host_rss_bytes_max_over_ranks", "model_state_bytes_max_over_ranks"]
    mib = {"ddp": 400, "fsdp": 250}
    rows = [
        row(s, 4, m, v * MIB, workload="transformer", world_size=2)
        for s, v in mib.items() for m in per_rank
    ]  # fmt: skip
    # a one-rank baseline of the same name is never the denominator of a two-rank cell
    rows += [row("ddp", 4, m, 100 * MIB, workload="transformer") for m in per_rank]
    rows += [row(s, 4, "throughput_samples_per_second", t, workload="transformer",
                 world_size=2) for s, t in (("ddp", 2.0), ("fsdp", 1.5))]  # fmt: skip
    for r in rows:  # the sharded cells come from a preset of their own: a second source
        r[COLUMNS.index("preset")] = "cpu-shard"
    rows += memory({"baseline": 100, "compile": 90}, batches=(4,), workload="transformer")
    c5 = claim(claims_table(frame(rows)), "C5")
    assert c5.verdict == NOT_MEASURABLE
    # the source with more rows first, then the other's figures under its name
    assert "fsdp: model state held by the rank (max over ranks), saving: 38%" in c5.measured
    assert "; cpu-test/cpu: compile: host RSS added by a step, saving: 10%" in c5.measured
    assert "fsdp: throughput, speedup: 0.75x" in c5.measured
    assert "fsdp vs ddp, same global batch and ranks" in c5.evidence


def test_accumulation_at_the_micro_batch_memory_is_confirmed():
    # accumulate-2 at batch B costs what baseline costs at B/2: the claim exactly.
    rows = memory({"baseline": 100}, batches=(2, 4, 8))
    rows += [row("accumulate-2", b, m, 100.0 * b / 2 * MIB) for b in (4, 8) for m in HOST]
    c6 = claim(claims_table(frame(rows)), "C6")
    assert c6.verdict == CONFIRMED
    assert "1.00x" in c6.measured and "0.50x" in c6.measured  # vs B/k, and vs B


def jittor_eval(peaks, failed=()):
    rows = []
    for batch, mib in peaks.items():
        status = "error" if batch in failed else "ok"
        value = math.nan if batch in failed else mib * MIB
        for m in ("peak_device_allocated_bytes", "peak_device_process_bytes"):
            rows.append(row("infer", batch, m, value, device=H100, framework="jittor",
                            status=status))  # fmt: skip
    return rows


def test_eval_memory_monotonicity_is_judged_for_jittor():
    grid = {100: 1000, 200: 2000, 300: 3000, 500: 5000}
    failing = claim(claims_table(frame(jittor_eval(grid, failed={200}))), "C7")
    assert failing.verdict == CONFIRMED
    assert claim(claims_table(frame(jittor_eval(grid))), "C7").verdict == REFUTED


def test_every_claim_appears_once_with_a_known_verdict():
    for table in (claims_table(frame()), claims_table(frame(memory({"baseline": 1})))):
        assert list(table.columns) == TABLE_COLUMNS
        assert list(table.id) == [f"C{i}" for i in range(1, 13)]
        assert set(table.verdict) <= set(VERDICTS)
    assert len({c.id for c in CLAIMS}) == len(CLAIMS) == 12


def committed_frame():
    from analysis.loader import latest, load

    loaded = load(REPO / "results")
    assert not loaded.problems
    return latest(loaded.frame)


def test_committed_cpu_results_give_verdicts_only_where_a_cpu_can_answer():
    committed = committed_frame()
    table = claims_table(committed[committed["device"] == "cpu"]).set_index("id")
    # what the results page says of them: C6 holds on one host layer only; C8 holds on both,
    # and forgetting no_grad keeps the graph (torch's infer-grad cells); C9 halves what the
    # step adds (0.52x) and what the model holds above the runtime (0.57x)
    expected = {"C6": INCONCLUSIVE, "C8": CONFIRMED, "C9": CONFIRMED}
    for cid, verdict in expected.items():
        assert table.loc[cid, "verdict"] == verdict, (cid, table.loc[cid, "reason"])
        assert table.loc[cid, "device"] == "cpu"
    for cid in GPU_CLAIMS:
        assert table.loc[cid, "verdict"] == NOT_MEASURABLE, cid
    for cid in ("C1", "C2"):  # GPU claims with a CPU figure for reference
        assert table.loc[cid, "reason"].startswith(GPU_REASON)
        assert "(cpu)" in table.loc[cid, "measured"]


def test_committed_gpu_results_judge_the_gpu_claims_they_measured_and_name_the_card():
    """The H200 session (47bc67f) ran torch's and JAX's cells, not Jittor's: C1 and C4 get
    verdicts from the card's allocator peaks; the Jittor claims stay unanswered."""
    table = claims_table(committed_frame()).set_index("id")
    c1 = table.loc["C1"]
    assert (c1["verdict"], c1["device"]) == (CONFIRMED, "NVIDIA H200")
    assert "amp-bf16: device allocated peak, saving: 46%" in c1["measured"]
    # checkpointing saved 20% of the U-Net's activations at 128^3, not the claimed two thirds
    assert (table.loc["C4", "verdict"], table.loc["C4", "device"]) == (REFUTED, "NVIDIA H200")
    for cid in ("C3", "C7", "C12"):
        assert table.loc[cid, "verdict"] == NOT_MEASURABLE, cid


def test_c7_is_judged_on_the_eval_probe_when_a_coarser_grid_exists_too():
    # The standard preset's coarse infer grid rises monotonically; the probe's fine grid (a
    # preset of its own) has a failure below a batch that runs: the probe decides.
    coarse = jittor_eval({100: 1000, 200: 2000, 400: 4000, 800: 8000})
    fine = jittor_eval({b: b * 10 for b in range(100, 600, 50)}, failed={200})
    for r in fine:
        r[COLUMNS.index("preset")] = "gpu-eval"
    # More rows in the standard preset: the default order (most data first) would pick it.
    extra = memory({"baseline": 10, "amp-bf16": 6}, batches=(100, 200, 400, 800), metrics=[
        "peak_device_allocated_bytes", "peak_device_process_bytes"], device=H100,
        framework="jittor")  # fmt: skip
    c7 = claim(claims_table(frame(coarse, extra, fine)), "C7")
    assert c7.verdict == CONFIRMED
    assert "gpu-eval" in c7.evidence and "100,150,200" in c7.evidence


# -- the advice claims: C8's second half, C10, C11 ----------------------------------------------
@pytest.mark.parametrize("graph, verdict", [(3.0, CONFIRMED), (1.0, REFUTED), (1.4, INCONCLUSIVE)])
def test_c8_forgetting_no_grad_is_judged_on_the_graphs_memory(graph, verdict):
    # infer at 0.4x training (the first half confirmed); infer-grad at `graph` x infer
    rows = memory({"baseline": 100, "infer": 40, "infer-grad": 40 * graph})
    c8 = claim(claims_table(frame(rows)), "C8")
    assert c8.verdict == verdict
    assert f"{graph:.2f}x" in c8.measured and "no_grad forgotten" in c8.measured
    assert "confirmed at 1.50x or more, refuted below 1.25x" in c8.reason


def test_c8_with_its_second_half_unmeasured_is_not_confirmed():
    c8 = claim(claims_table(frame(memory({"baseline": 100, "infer": 40}))), "C8")
    assert c8.verdict == INCONCLUSIVE and c8.reason.startswith("not measured: forgetting no_grad")


def held(strategy_mib, runtime_mib=300, batches=(2, 4), framework="torch"):
    """CPU rows whose peak above the runtime (peak RSS - RSS after import) is given."""
    rows = []
    for strategy, mib in strategy_mib.items():
        for b in batches:
            rows.append(row(strategy, b, "peak_host_rss_bytes", (runtime_mib + mib) * MIB,
                            framework=framework))  # fmt: skip
            rows.append(row(strategy, b, "host_rss_after_import_bytes", runtime_mib * MIB,
                            framework=framework))  # fmt: skip
    return rows


@pytest.mark.parametrize(
    "resident, sequential, verdict",
    [(200, 100, CONFIRMED), (150, 100, REFUTED), (200, 190, REFUTED), (200, 130, INCONCLUSIVE)],
)
def test_c10_two_models_against_one_on_the_memory_above_the_runtime(resident, sequential, verdict):
    rows = held({"infer": 100, "two-models-resident": resident,
                 "two-models-sequential": sequential})  # fmt: skip
    rows += held({"infer": 100, "two-models-resident": 110}, framework="jax")  # shown, not judged
    c10 = claim(claims_table(frame(rows)), "C10")
    assert c10.verdict == verdict
    assert c10.device == "cpu" and "peak RSS - RSS after import" in c10.measured
    assert "1.80x..2.20x" in c10.reason and "confirmed at 1.20x or less" in c10.reason


def step_means(seconds, framework="torch", workload="resnet50", device=H100):
    return [
        row(
            strategy,
            b,
            "step_seconds_mean",
            s,
            framework=framework,
            workload=workload,
            device=device,
        )
        for strategy, s in seconds.items()
        for b in (1, 2)
    ]


@pytest.mark.parametrize(
    "hygiene, verdict", [(0.1, CONFIRMED), (1.1, REFUTED), (0.6, INCONCLUSIVE)]
)
def test_c11_hygiene_is_judged_on_the_mean_training_step(hygiene, verdict):
    rows = step_means({"host-data": 1.0, "hygiene-2": hygiene})
    rows += step_means({"host-data": 2.0, "hygiene-2": 2 * hygiene}, framework="jittor")
    rows += [row("hygiene-2", b, "collector_share", 0.25, device=H100) for b in (1, 2)]
    c11 = claim(claims_table(frame(rows)), "C11")
    assert c11.verdict == verdict
    assert f"{1 / hygiene:.2f}x" in c11.measured and "25%" in c11.measured
    assert "confirmed at 2.00x or more, refuted below 1.50x" in c11.reason
    assert "Flux.jl is not available" in c11.reason


def test_c11_is_not_judged_on_a_cpu_whose_memory_is_never_under_pressure():
    """The committed Intel host measured hygiene 0.94x as fast: a CPU's batches sit far below
    its memory, so the claim's condition is missing, and its figure is shown, not judged."""
    rows = step_means({"host-data": 1.0, "hygiene-2": 1.06}, device="cpu")
    c11 = claim(claims_table(frame(rows)), "C11")
    assert c11.verdict == NOT_MEASURABLE and c11.reason.startswith(GPU_REASON)
    assert "0.94x" in c11.measured and "(cpu)" in c11.measured


def test_c11_frameworks_on_both_sides_are_inconclusive():
    rows = step_means({"host-data": 1.0, "hygiene-2": 0.1})
    rows += step_means({"host-data": 1.0, "hygiene-2": 1.0}, framework="jax")
    c11 = claim(claims_table(frame(rows)), "C11")
    assert c11.verdict == INCONCLUSIVE and "batches disagree" in c11.reason


def test_a_saving_that_rounds_to_nothing_is_no_negative_saving():
    from analysis.claims.findings import fmt

    assert fmt("saving", -0.002) == "0%" and fmt("saving", -0.006) == "-1%"
    assert fmt("ratio", 0.5) == "0.50x"
