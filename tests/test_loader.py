"""The loader and the comparison tables on small result sets written here."""

import json
import math
import re

import pandas as pd
import pytest

from analysis.loader import export, latest, load
from analysis.schema import COLUMNS, CORE_METRICS
from analysis.tables import comparison_tables, comparison_tables_html
from membench.metrics import CELL_WALL
from membench.records import Cell, Record, RecordStore

MIB = 2**20
WALL = 3.5  # every record's wall time


def record(strategy, batch, status="ok", peak_mib=1000.0, started="2026-01-01T00:00:00+00:00",
           reason=""):  # fmt: skip
    metrics = {}
    if status == "ok":
        metrics = {
            "peak_host_rss_bytes": peak_mib * MIB,
            "peak_host_rss_delta_bytes": peak_mib / 2 * MIB,
            "throughput_samples_per_second": 10.0 * batch,
            "step_seconds_median": 0.1,
        }
    return Record(
        Cell("resnet50", "torch", strategy, batch, "cpu"), status, reason, metrics,
        step_times=[0.1, 0.1, 0.2, 0.1] if status == "ok" else [],
        environment={"machine": "m1", "device": "cpu", "framework_version": "2.13.0",
                     "git": {"commit": "abc"}},
        started_at=started, wall_seconds=WALL,
    )  # fmt: skip


@pytest.fixture
def results(tmp_path):
    store = RecordStore(tmp_path / "records" / "m1" / "cpu-abc")
    for batch, base, ckpt in [(2, 800, 700), (4, 1000, 850)]:
        store.put(record("baseline", batch, peak_mib=base))
        store.put(record("checkpoint", batch, peak_mib=ckpt))
    reason = "expandable_segments configures the CUDA caching allocator"
    store.put(record("expandable-segments", 2, status="unsupported", reason=reason))
    return tmp_path


def test_rows_carry_cells_values_and_statuses(results):
    loaded = load(results)
    frame = loaded.frame
    assert loaded.problems == []
    assert list(frame.columns) == COLUMNS
    peak = frame[(frame.metric == "peak_host_rss_bytes") & (frame.strategy == "checkpoint")]
    assert sorted(peak.value / MIB) == [700, 850]
    assert set(peak.layer) == {"host"} and set(peak.unit) == {"bytes"}
    bad = frame[frame.strategy == "expandable-segments"]
    measured = bad[bad.metric != CELL_WALL]
    assert list(measured.metric) == CORE_METRICS  # a status row per core metric
    assert set(bad.status) == {"unsupported"} and measured.value.isna().all()
    # and what the cell cost, whatever its status
    assert list(bad[bad.metric == CELL_WALL].value) == [WALL]
    assert "CUDA caching allocator" in bad.reason.iloc[0]


def test_step_time_spread_comes_from_the_raw_samples(results):
    frame = load(results).frame
    step = frame[(frame.metric == "step_seconds_median")].iloc[0]
    assert step.n_samples == 4
    assert step.spread_low == pytest.approx(0.1) and step.spread_high == pytest.approx(0.125)


def test_corrupt_and_foreign_files_are_reported_and_skipped(results):
    (results / "records" / "m1" / "cpu-abc" / "broken.json").write_text('{"cell": {"work')
    (results / "asv" / "m1").mkdir(parents=True)
    (results / "asv" / "m1" / "abc-env.json").write_text(json.dumps({"hello": "world"}))
    loaded = load(results)
    assert len(loaded.problems) == 2
    assert any("broken.json" in p for p in loaded.problems)
    assert any("abc-env.json" in p and "not an asv results file" in p for p in loaded.problems)
    assert len(loaded.frame) == len(load_clean(results))


def load_clean(results):
    (results / "records" / "m1" / "cpu-abc" / "broken.json").unlink()
    (results / "asv" / "m1" / "abc-env.json").unlink()
    return load(results).frame


def test_asv_file_with_mismatched_params_is_refused_whole(results):
    (results / "asv" / "m1").mkdir(parents=True)
    good = {
        "version": 2, "commit_hash": "abc", "result_columns": ["result", "params"],
        "results": {"suite.Resnet50.track_peak_host_rss": [
            [1.0, None], [["'torch'"], ["'baseline'", "'checkpoint'"], ["2"]]]},
    }  # fmt: skip
    (results / "asv" / "m1" / "abc-ok.json").write_text(json.dumps(good))
    bad = json.loads(json.dumps(good))
    bad["results"]["suite.Resnet50.track_peak_host_rss"][0] = [1.0]
    (results / "asv" / "m1" / "abc-bad.json").write_text(json.dumps(bad))
    loaded = load(results)
    asv = loaded.frame[loaded.frame.source == "asv"]
    assert len(asv) == 2 and set(asv.path) == {str(results / "asv" / "m1" / "abc-ok.json")}
    assert list(asv.status) == ["ok", "n/a"] and math.isnan(asv.value.iloc[1])
    assert asv.workload.iloc[0] == "resnet50"
    assert any("abc-bad.json" in p and "1 results for 2" in p for p in loaded.problems)


def test_latest_keeps_the_newest_measurement_of_a_cell(results):
    store = RecordStore(results / "records" / "m1" / "cpu-def")
    store.put(record("baseline", 2, peak_mib=900, started="2026-02-01T00:00:00+00:00"))
    frame = latest(load(results).frame)
    peak = frame[(frame.metric == "peak_host_rss_bytes") & (frame.strategy == "baseline")]
    assert sorted(peak.value / MIB) == [900, 1000]


def test_export_round_trips(results, tmp_path):
    frame = load(results).frame
    csv, parquet = export(frame, tmp_path / "out")
    assert len(pd.read_csv(csv)) == len(frame) == len(pd.read_parquet(parquet))
    assert list(pd.read_parquet(parquet).columns) == COLUMNS


def test_tables_show_values_savings_and_statuses(results):
    frame = latest(load(results).frame)
    md = comparison_tables(frame)
    peak = md["resnet50 on cpu (preset cpu): peak host RSS [host layer], MiB"]
    assert re.search(r"\| torch +\| checkpoint +\| +700 +\| +850 +\|", peak)
    # expandable-segments, refused at every batch, has no row (the support matrix says it
    # once) but its reason is under the table
    assert "| expandable-segments" not in peak
    assert "unsupported" in peak and "CUDA caching allocator" in peak
    savings = md["resnet50 on cpu (preset cpu): peak host RSS [host layer] against each "
                 "framework's baseline"]  # fmt: skip
    assert "-12%" in savings and "-15%" in savings  # 700/800 and 850/1000
    html = comparison_tables_html(frame)
    assert all("<table" in t for t in html.values())


def test_a_failed_cell_on_a_gpu_host_sorts_with_the_gpu(results):
    store = RecordStore(results / "records" / "h100" / "gpu-abc")
    failed = record("baseline", 2048, status="oom", reason="CUDA out of memory")
    failed.environment = {"machine": "h100", "gpu_name": "NVIDIA H100 80GB HBM3"}
    store.put(failed)
    frame = load(results).frame
    assert set(frame[frame.machine == "h100"].device) == {"NVIDIA H100 80GB HBM3"}


def test_framework_against_framework_at_the_same_strategy(results):
    store = RecordStore(results / "records" / "m1" / "cpu-jax")
    for batch, peak in [(2, 640), (4, 1100)]:  # torch baseline: 800, 1000
        r = record("baseline", batch, peak_mib=peak)
        r.cell = Cell("resnet50", "jax", "baseline", batch, "cpu")
        store.put(r)
    md = comparison_tables(latest(load(results).frame))
    versus = md["resnet50 on cpu (preset cpu): peak host RSS [host layer], framework / torch"]
    assert re.search(r"\| baseline +\| +2 \| +0\.80x +\|", versus)
    assert re.search(r"\| baseline +\| +4 \| +1\.10x +\|", versus)
    # the HTML table: a header per column, people's names, the ratio's terms named; no row
    # header cell from the pivot's columns name ("framework" over an empty column)
    table = comparison_tables_html(latest(load(results).frame))[
        "resnet50 on cpu (preset cpu): peak host RSS [host layer], framework / torch"
    ]
    assert re.findall(r"<th>([^<]*)</th>", table) == ["strategy", "batch", "jax / torch"]
    assert "<th></th>" not in table and "batch_size" not in table
    rows = re.findall(r"<tr>\s*<td>([^<]*)</td>\s*<td>([^<]*)</td>\s*<td>([^<]*)</td>", table)
    assert rows[:2] == [("baseline", "2", "0.80x"), ("baseline", "4", "1.10x")]
    assert rows[2:] == [("checkpoint", "2", "-"), ("checkpoint", "4", "-")]  # jax ran none
    assert "| strategy   |   batch | jax / torch   |" in versus
