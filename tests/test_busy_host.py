"""A busy host does not pass silently: a cell measured while other processes used more than
metrics.BUSY_SHARE of the CPU is flagged, measured once more, and kept out of asv and the
tables' speed figures while still busy, unless recorded anyway (--allow-busy), marked."""

import io
import math
from pathlib import Path

import pytest
from rich.console import Console

from analysis.loader import record_rows
from membench.cells import progress as bench
from membench.cells.supervision import RunResult
from membench.metrics import BUSY_ALLOWED, BUSY_SHARE, busy_share, kept_out_as_busy
from membench.publish import asv_suite
from membench.records import Cell, Record, RecordStore

CELL = Cell("transformer", "torch", "baseline", 4, "smoke")
OTHER = Cell("transformer", "torch", "infer", 4, "smoke")


def record(cell: Cell, share: float) -> Record:
    return Record(
        cell, "ok", metrics={
            "host_foreign_cpu_share": share, "peak_host_rss_bytes": 300 * 2**20,
            "throughput_samples_per_second": 600.0, "step_seconds_median": 0.0067,
        }, step_times=[0.006, 0.0067, 0.007],
    )  # fmt: skip


def test_the_threshold_is_the_documented_ten_percent():
    assert BUSY_SHARE == 0.10
    assert busy_share({"host_foreign_cpu_share": 0.5}) == 0.5
    assert busy_share({"host_foreign_cpu_share": 0.1}) is None  # above, not at
    assert busy_share({}) is None
    assert kept_out_as_busy({"host_foreign_cpu_share": 0.5}, {})
    assert not kept_out_as_busy({"host_foreign_cpu_share": 0.5}, {BUSY_ALLOWED: True})


def test_asv_shows_a_busy_cell_as_na_unless_recorded_anyway():
    with pytest.raises(NotImplementedError, match="busy host: other processes used 50%"):
        asv_suite.usable(record(CELL, 0.5))
    asv_suite.usable(record(CELL, 0.05))
    allowed = record(CELL, 0.5)
    allowed.environment[BUSY_ALLOWED] = True
    asv_suite.usable(allowed)


class Engine:
    """Hands back prepared records in turn (the shares a real host reported are the test's
    input here: what is under test is what bench does with them)."""

    name = "local"

    def __init__(self, shares_per_run: list[dict[Cell, float]]):
        self.runs = list(shares_per_run)
        self.calls: list[tuple[list[Cell], bool]] = []

    def run(self, cells, store, control):
        self.calls.append((list(cells), control.fresh))
        shares = self.runs.pop(0)
        records = []
        for cell in cells:
            rec = record(cell, shares[cell])
            store.put(rec)
            control.on_done(rec, False)
            records.append(rec)
        return RunResult(records, len(records), 0)


def _run(tmp_path: Path, engine: Engine, allow_busy: bool, monkeypatch) -> tuple[RunResult, str]:
    out = io.StringIO()
    monkeypatch.setattr(bench, "console", Console(file=out, width=300))
    store = RecordStore(tmp_path)
    result = bench.run_with_progress(
        [CELL, OTHER], store, engine=engine, busy_rule=True, allow_busy=allow_busy
    )
    return result, out.getvalue()


def test_a_busy_cell_is_flagged_and_measured_once_more_at_the_end(tmp_path, monkeypatch):
    engine = Engine([{CELL: 0.5, OTHER: 0.02}, {CELL: 0.04}])
    result, out = _run(tmp_path, engine, False, monkeypatch)
    assert engine.calls == [([CELL, OTHER], False), ([CELL], True)]  # once, fresh, busy only
    assert "busy host: other processes used 50% of the CPU" in out
    assert "1 cells measured on a busy host: measuring them once more" in out
    assert [r.metrics["host_foreign_cpu_share"] for r in result.records] == [0.04, 0.02]
    assert "still" not in out


def test_a_cell_still_busy_stays_out_unless_allowed_and_then_is_marked(tmp_path, monkeypatch):
    engine = Engine([{CELL: 0.5, OTHER: 0.02}, {CELL: 0.3}])
    result, out = _run(tmp_path, engine, False, monkeypatch)
    assert len(engine.calls) == 2  # measured again once, not until idle
    assert "1 cells still measured on a busy host: kept out of asv" in out
    stored = RecordStore(tmp_path).get(CELL)
    assert (
        stored.metrics["host_foreign_cpu_share"] == 0.3 and BUSY_ALLOWED not in stored.environment
    )

    engine = Engine([{CELL: 0.5, OTHER: 0.02}, {CELL: 0.3}])
    result, out = _run(tmp_path / "allowed", engine, True, monkeypatch)
    assert "recorded anyway and marked (--allow-busy)" in out
    assert RecordStore(tmp_path / "allowed").get(CELL).environment[BUSY_ALLOWED] is True
    asv_suite.usable(RecordStore(tmp_path / "allowed").get(CELL))


def test_tables_keep_a_busy_cells_memory_and_share_but_not_its_speed(tmp_path):
    rows = {r["metric"]: r for r in record_rows(record(CELL, 0.5), tmp_path / "m" / "s" / "x")}
    assert math.isnan(rows["throughput_samples_per_second"]["value"])
    assert math.isnan(rows["step_seconds_median"]["value"])
    assert math.isnan(rows["step_seconds_median"]["spread_low"])
    assert rows["peak_host_rss_bytes"]["value"] == 300 * 2**20
    assert rows["host_foreign_cpu_share"]["value"] == 0.5
    allowed = record(CELL, 0.5)
    allowed.environment[BUSY_ALLOWED] = True
    rows = {r["metric"]: r for r in record_rows(allowed, tmp_path / "m" / "s" / "x")}
    assert rows["throughput_samples_per_second"]["value"] == 600.0
