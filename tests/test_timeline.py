"""The memory timeline: sampled by the runner outside the worker, marked by the worker's phases,
stored beside the record, honest against the record's VmHWM."""

import os
import subprocess
import sys
import time

import pytest

from membench.cells import supervision, worker_launch
from membench.instruments import marks, timeline
from membench.records import Cell

from .test_runner import fake_cell

MIB = 2**20


def test_marks_are_read_back_in_order_and_a_torn_line_is_dropped(tmp_path):
    path = tmp_path / "m"
    marks.open_marks(path)
    try:
        marks.mark(marks.IMPORT)
        marks.mark(marks.BUILD)
        with pytest.raises(ValueError, match="unknown mark 'lunch'"):
            marks.mark("lunch")
    finally:
        marks.close_marks()
    marks.mark(marks.STEP)  # closed: a no-op, not an error
    with open(path, "a") as f:
        f.write("12.5")  # a worker killed mid-line
    found = marks.read_marks(path)
    assert [n for _, n in found] == [marks.IMPORT, marks.BUILD]
    assert found[0][0] <= found[1][0] <= time.monotonic()
    assert marks.read_marks(tmp_path / "absent") == []


def _samples(t, rss, others=None):
    return timeline.Samples(
        t=list(t), rss=list(rss), others=list(others or [0] * len(rss)),
        processes=[1] * len(rss), device=[None] * len(rss), cpu_seconds=0.01, wall_seconds=1.0,
    )  # fmt: skip


def test_the_summary_names_the_peaks_phase_and_its_gap_to_vmhwm():
    m = [
        (0.0, marks.LAUNCH), (1.0, marks.FIRST_STEP), (1.1, marks.FORWARD),
        (1.5, marks.BACKWARD), (2.0, marks.WARM_UP), (3.0, marks.MEASURED), (3.0, marks.STEP),
        (3.1, marks.FORWARD), (3.4, marks.BACKWARD), (3.8, marks.OPTIMIZER), (4.0, marks.AFTER),
    ]  # fmt: skip
    t = [0.5, 1.2, 1.6, 2.5, 3.2, 3.5, 3.9, 4.5]
    rss = [100, 200, 900, 300, 400, 700, 500, 100]
    summary = timeline.summarise(_samples(t, rss, [0, 50, 0, 0, 0, 0, 0, 0]), m, vmhwm=720)
    assert summary["peak_bytes"] == 900
    assert (summary["peak_phase"], summary["peak_step_phase"]) == (marks.FIRST_STEP, "backward")
    assert summary["measured_peak_bytes"] == 700  # 3.2, 3.5, 3.9 lie in the measured steps
    assert summary["peak_gap_bytes"] == 20
    assert summary["sampling_bound_bytes"] == 300  # 400 -> 700
    assert summary["others_peak_bytes"] == 50
    assert summary["sampler_cpu_share"] == pytest.approx(0.01)


def test_a_timeline_without_measured_steps_keeps_its_whole_cell_peak_only():
    summary = timeline.summarise(_samples([0.1, 0.2], [5, 9]), [(0.0, marks.LAUNCH)], vmhwm=None)
    assert summary["peak_bytes"] == 9 and summary["peak_phase"] == marks.LAUNCH
    assert "measured_peak_bytes" not in summary and "peak_gap_bytes" not in summary


ALLOCATE_THEN_FORK = """
import os, time
block = bytearray(120 * 2**20)
for i in range(0, len(block), 4096):
    block[i] = 1
time.sleep(0.6)
if os.fork() == 0:
    extra = bytearray(60 * 2**20)
    for i in range(0, len(extra), 4096):
        extra[i] = 1
    time.sleep(1.2)
    os._exit(0)
time.sleep(1.6)
"""


def test_the_sampler_reads_the_worker_and_its_forked_children_apart():
    proc = subprocess.Popen([sys.executable, "-c", ALLOCATE_THEN_FORK], start_new_session=True)
    reads = []
    sampler = timeline.GroupSampler(proc.pid, device=lambda: reads.append(1) or 7).start()
    proc.wait(timeout=30)
    samples = sampler.stop()
    assert max(samples.rss) >= 120 * MIB
    # the child: its own 60 MiB and the pages it shares with the worker, counted again
    assert max(samples.others) >= 60 * MIB + 120 * MIB
    assert max(samples.processes) == 2
    gaps = [b - a for a, b in zip(samples.t, samples.t[1:], strict=False)]
    assert sorted(gaps)[len(gaps) // 2] < 3 * timeline.INTERVAL_SECONDS
    # NVML's reading comes every DEVICE_INTERVAL_SECONDS, a gap (None) between
    assert 7 in samples.device and None in samples.device
    assert len(reads) < len(samples.t)
    assert samples.cpu_seconds > 0 and samples.wall_seconds >= 2.0


def test_a_timeline_file_round_trips_with_its_marks_and_summary(tmp_path):
    samples = _samples([10.0, 10.005, 10.01], [1, 3, 2])
    samples.device = [None, 5, None]
    path = tmp_path / "timelines" / "cell.parquet"
    m = [(9.99, marks.LAUNCH), (10.004, marks.IMPORT)]
    timeline.write(path, samples, m, {"peak_bytes": 3}, "the step as one phase")
    table, meta = timeline.read(path)
    assert table.column("t").to_pylist() == pytest.approx([0.0, 0.005, 0.01])
    assert table.column("rss_bytes").to_pylist() == [1, 3, 2]
    assert table.column("device_bytes").to_pylist() == [None, 5, None]
    assert meta["marks"] == [[-0.01, "launch"], [0.004, "import"]]
    assert meta["summary"] == {"peak_bytes": 3}
    assert meta["format"] == timeline.FORMAT and meta["cell_phases"][0] == "launch"
    assert [p.name for p in path.parent.iterdir()] == ["cell.parquet"]  # no temporary left


SAMPLE = worker_launch.WorkerOptions(timeline=True)  # --timeline


def test_a_worker_that_holds_the_interpreter_lock_is_still_sampled(
    fake_framework, store, monkeypatch
):
    """The sampler runs in the runner: a step that never lets go of the GIL (a thread inside
    the worker would stop) leaves no hole in the timeline."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "hold-gil")
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.3")
    record = supervision.run(
        [fake_cell()], store, supervision.RunControl(timeout=60, worker=SAMPLE)
    ).records[0]
    assert record.status == "ok", record.reason
    table, meta = timeline.read(store.root / record.environment["timeline"]["file"])
    t = table.column("t").to_pylist()
    start, end = (s for s, n in meta["marks"] if n in (marks.MEASURED, marks.AFTER))
    inside = [x for x in t if start <= x <= end]
    assert end - start >= 0.9  # three steps of 0.3 s
    assert max(b - a for a, b in zip(inside, inside[1:], strict=False)) < 0.05
    assert len(inside) >= (end - start) / timeline.INTERVAL_SECONDS / 3


def test_a_growing_cells_timeline_peak_agrees_with_its_vmhwm(fake_framework, store, monkeypatch):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "leak")
    monkeypatch.setenv("FAKE_MIB_PER_SAMPLE", "40")
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.05")
    record = supervision.run(
        [fake_cell()], store, supervision.RunControl(timeout=60, worker=SAMPLE)
    ).records[0]
    assert record.status == "ok", record.reason
    m, env = record.metrics, record.environment["timeline"]
    vmhwm, peak = m["peak_host_rss_bytes"], m["timeline_measured_peak_host_rss_bytes"]
    assert abs(vmhwm - peak) <= max(m["timeline_sampling_bound_bytes"], MIB)
    assert m["timeline_peak_gap_bytes"] == pytest.approx(vmhwm - peak)
    assert env["file"] == "timelines/fake-work--fake--baseline--bs1.parquet"
    assert env["peak_phase"] in (marks.MEASURED, marks.AFTER)  # it grows to the end
    assert (store.root / env["file"]).exists()
    table, meta = timeline.read(store.root / env["file"])
    names = [n for _, n in meta["marks"]]
    assert names[:6] == [*marks.CELL_PHASES[:6]]
    assert names.count(marks.STEP) == 3 and names[-1] == marks.AFTER  # smoke: 3 measured
    assert meta["step_phases_marked"] == "the step as one phase"
    assert not list((store.root / "logs").glob("*.marks"))  # the marks file is not left behind


def test_a_timed_out_cell_keeps_its_timeline_and_leaves_no_marks(
    fake_framework, store, monkeypatch
):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "hang")
    record = supervision.run(
        [fake_cell()], store, supervision.RunControl(timeout=4, worker=SAMPLE)
    ).records[0]
    assert record.status == "timeout"
    table, meta = timeline.read(store.root / record.environment["timeline"]["file"])
    assert [n for _, n in meta["marks"]][-1] == marks.FIRST_STEP  # where it hung
    assert table.column("t").to_pylist()[-1] >= 3.5
    assert "timeline_peak_gap_bytes" not in record.metrics  # no VmHWM to set it against
    assert not list(store.root.rglob("*.marks"))


def test_a_timeline_that_cannot_be_written_leaves_the_record_whole(
    fake_framework, store, monkeypatch
):
    def refuse(*args, **kwargs):
        raise ValueError("no columnar files today")

    monkeypatch.setattr(timeline, "write", refuse)
    monkeypatch.setenv("FAKE_BEHAVIOUR", "count")
    record = supervision.run(
        [fake_cell()], store, supervision.RunControl(timeout=60, worker=SAMPLE)
    ).records[0]
    assert record.status == "ok" and len(record.step_times) == 3
    assert record.environment["timeline_error"] == "ValueError: no columnar files today"
    assert "timeline" not in record.environment and "step_phases_marked" not in record.environment
    assert store.get(fake_cell()).status == "ok"


def test_without_timeline_nothing_is_sampled(fake_framework, store, monkeypatch):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "count")
    record = supervision.run([fake_cell()], store, supervision.RunControl(timeout=60)).records[0]
    assert record.status == "ok" and "timeline" not in record.environment
    assert not any(k.startswith("timeline_") for k in record.metrics)
    assert not (store.root / "timelines").exists()


def test_the_cli_asks_for_timelines_with_a_flag(fake_framework, tmp_path, monkeypatch):
    from .test_runner import fake_cli_run

    env = {**os.environ, "FAKE_BEHAVIOUR": "count"}
    done = subprocess.run(
        fake_cli_run(tmp_path, "-s", "baseline", "-b", "1,2", "--timeline"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "memory timeline per cell: sampled every 5 ms" in done.stdout
    assert sorted(p.name for p in (tmp_path / "timelines").iterdir()) == [
        "fake-work--fake--baseline--bs1.parquet",
        "fake-work--fake--baseline--bs2.parquet",
    ]


def test_a_real_torch_cell_marks_forward_backward_and_optimizer(store):
    cell = Cell("transformer", "torch", "baseline", 2, "smoke")
    record = supervision.run([cell], store, supervision.RunControl(worker=SAMPLE)).records[0]
    assert record.status == "ok", record.reason
    m = record.metrics
    assert abs(m["timeline_peak_gap_bytes"]) <= max(m["timeline_sampling_bound_bytes"], MIB)
    assert m["timeline_peak_host_rss_bytes"] >= m["timeline_measured_peak_host_rss_bytes"]
    table, meta = timeline.read(store.root / record.environment["timeline"]["file"])
    names = [n for _, n in meta["marks"]]
    first = names.index(marks.MEASURED)
    assert names[first + 1 : first + 5] == ["step", "forward", "backward", "optimizer"]
    assert "forward, backward and optimizer marked" in meta["step_phases_marked"]
    assert table.num_rows == record.environment["timeline"]["samples"]


# -- the pictures and pages (analysis/timelines.py) ----------------------------------------------
@pytest.fixture(scope="module")
def timeline_results(tmp_path_factory):
    """results/ with the fake framework's baseline and checkpoint cells measured with their
    timelines (results/timelines/<machine>/smoke-...), and the same records as the tables'."""
    from membench import paths
    from membench.environment import machine_name
    from membench.records import RecordStore

    from .conftest import PLUGIN, REPO

    results = tmp_path_factory.mktemp("results")
    store = RecordStore(paths.timeline_store(machine_name(), "smoke", "0" * 12, results))
    env = {
        "MEMBENCH_PLUGINS": PLUGIN, "FAKE_BEHAVIOUR": "leak",
        "FAKE_MIB_PER_SAMPLE": "30", "FAKE_STEP_SECONDS": "0.05",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }  # fmt: skip
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        import importlib

        importlib.import_module(PLUGIN)
        cells = [Cell("fake-work", "fake", s, 1, "smoke") for s in ("baseline", "checkpoint")]
        records = supervision.run(
            cells, store, supervision.RunControl(timeout=60, worker=SAMPLE)
        ).records
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert [r.status for r in records] == ["ok", "ok"]
    tables = RecordStore(paths.preset_store(machine_name(), "smoke", "1" * 12, results))
    for record in records:  # the tables' own run of the same cells, without timelines
        record.environment.pop("timeline")
        tables.put(record)
    return results, machine_name(), records


def test_the_drawn_timelines_are_one_stores_baseline_and_memory_strategy(timeline_results):
    from analysis import timelines as T

    results, machine, records = timeline_results
    found, problems = T.load_timelines(results)
    assert problems == [] and len(found) == 2  # the tables' run names no timeline
    drawn = T.chosen(found, machine, "fake-work")
    assert [t.strategy for t in drawn] == ["baseline", "checkpoint"]
    assert len({t.store for t in drawn}) == 1
    steps = T.per_step(drawn[0])
    # the first step at [-1.3, -0.3], the warm-up's gap, three measured steps from 0
    assert steps["x"].min() >= T.FIRST_STEP_X and steps["x"].max() <= 3
    assert steps["rss_mib"].max() == pytest.approx(drawn[0].summary["peak_bytes"] / MIB, rel=0.05)
    table = T.table(drawn)
    by_strategy = {r.cell.strategy: r for r in records}
    row = table[table["strategy"] == "baseline"].iloc[0]
    assert row["VmHWM MiB"] == round(by_strategy["baseline"].metrics["peak_host_rss_bytes"] / MIB)
    assert row["where"] in ("measured steps", "after the measured steps")
    assert T.where_peaks(drawn)[0].startswith("- fake: the cell peaks at ")


def test_the_workload_page_opens_with_its_timeline_picture(timeline_results, tmp_path):
    from analysis.results_page import write_pages

    results, machine, _ = timeline_results
    written = write_pages(results, tmp_path)
    png = tmp_path / machine / "fake-work-timeline.png"
    assert png in written and png.read_bytes().startswith(b"\x89PNG")
    page = (tmp_path / machine / "fake-work.md").read_text()
    first = page.index("## ")
    assert page[first:].startswith("## Memory over time")
    assert (
        "![fake-work: resident memory over a cell, per framework](fake-work-timeline.png)" in page
    )
    assert "| fake | baseline |" in page
    # the timelines gone, their picture goes too
    import shutil

    shutil.move(results / "timelines", tmp_path / "moved")
    try:
        write_pages(results, tmp_path)
        assert not png.exists()
        assert "Memory over time" not in (tmp_path / machine / "fake-work.md").read_text()
    finally:
        shutil.move(tmp_path / "moved", results / "timelines")


def test_the_html_report_has_the_memory_over_time_section(timeline_results, tmp_path):
    from analysis.report import write_report

    results, machine, _ = timeline_results
    index = write_report(results, tmp_path / "report")
    text = index.read_text()
    assert '<h2 id="timelines">Memory over time</h2>' in text
    assert f'<img src="timelines/{machine}-fake-work-timeline.png"' in text
    assert (tmp_path / "report" / "timelines" / f"{machine}-fake-work-timeline.png").exists()


def test_a_gpu_timeline_draws_nvmls_device_memory_beside_the_host(tmp_path):
    """The device column (NVML, GPU hosts) is drawn in the whole-cell panel."""
    from analysis import timelines as T

    samples = _samples([0.0, 0.005, 0.01, 0.015], [100 * MIB, 120 * MIB, 130 * MIB, 90 * MIB])
    samples.device = [None, 500 * MIB, None, 700 * MIB]
    path = tmp_path / "cell.parquet"
    m = [(0.0, marks.LAUNCH), (0.004, marks.IMPORT)]
    timeline.write(path, samples, m, {"peak_bytes": 130 * MIB}, "", origin=0.0)
    frame, meta = T.read_timeline(path)
    t = T.Timeline("m", "gpu-c0", "resnet50", "torch", "baseline", 8, "gpu", "", frame,
                   [(float(a), str(b)) for a, b in meta["marks"]], meta)  # fmt: skip
    fig = T.figure([t], "resnet50")
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    device = lines["device memory (NVML, per process)"]
    assert list(device.get_ydata()) == [500.0, 700.0]
    assert list(lines["worker"].get_ydata()) == [100.0, 120.0, 130.0, 90.0]


def _drawn_cell(framework, strategy, others_peak_mib=0.0):
    """A timeline of the per-step view's shape: the worker peaks at 900 MiB at the very end of
    its first step, then the warm-up, three measured steps at 700 MiB; its other processes
    (a compiler's, as Jittor's) reach others_peak_mib during the build."""
    import pandas as pd

    from analysis import timelines as T

    marks_at = [
        (0.0, marks.LAUNCH), (0.5, marks.IMPORT), (1.0, marks.BUILD), (2.0, marks.FIRST_STEP),
        (3.0, marks.WARM_UP), (4.0, marks.MEASURED), (4.0, marks.STEP), (5.0, marks.STEP),
        (6.0, marks.STEP), (7.0, marks.AFTER),
    ]  # fmt: skip
    t = [i / 100 for i in range(0, 751)]
    rss = [(900 if abs(x - 2.99) < 1e-9 else 700 if x >= 2 else 300) * MIB for x in t]
    others = [others_peak_mib * MIB if 1.2 <= x <= 1.5 else 0 for x in t]
    samples = pd.DataFrame({"t": t, "rss_bytes": rss, "others_rss_bytes": others})
    summary = {"peak_bytes": 900 * MIB, "peak_phase": "first step"}
    meta = {"summary": summary, "step_phases_marked": "the step as one phase"}
    return T.Timeline("m", "cpu-0", "unet3d", framework, strategy, 2, "cpu", "", samples,
                      marks_at, meta)  # fmt: skip


def test_the_per_step_view_leaves_a_gap_for_the_warm_up_and_a_first_step_peak_left_of_it():
    """The first step spans [-1.3, -0.3], the warm-up left out between it and the measured
    steps at [0, 3]: a peak at the first step's very end is drawn left of the gap and named."""
    from analysis import timelines as T

    cell = _drawn_cell("jax", "baseline")
    steps = T.per_step(cell).dropna()
    first, measured = steps[steps["x"] < 0], steps[steps["x"] >= 0]
    assert first["x"].min() == pytest.approx(-1.3) and first["x"].max() == pytest.approx(-0.3)
    assert measured["x"].min() == pytest.approx(0) and measured["x"].max() == pytest.approx(3)
    fig = T.figure([cell, _drawn_cell("jax", "checkpoint")], "unet3d")
    for ax in (fig.axes[1], fig.axes[2]):  # the per-step rows
        dot = next(line for line in ax.get_lines() if line.get_marker() == "o")
        assert dot.get_xdata()[0] == pytest.approx(-0.31, abs=0.01)
        assert dot.get_ydata()[0] == 900
        label = next(t.get_text() for t in ax.texts if t.get_text().startswith("peak"))
        assert label == "peak 900 MiB (first step)"
        assert list(ax.get_xticks()) == pytest.approx([-0.8, 0, 1, 2, 3])
        assert [t.get_text() for t in ax.get_xticklabels()] == ["first", "0", "1", "2", "3"]


def test_the_whole_cell_panel_keeps_its_scale_its_peak_in_the_title_and_the_legend_clear():
    """Other processes that reach 1,400 MiB go on a right axis of their own: the worker's axis
    stays its curve's (700 -> 900 MiB peak, with headroom), like a panel without them; the
    peak is in the title, and the legend sits above every curve."""
    from analysis import timelines as T

    cells = [_drawn_cell("torch", "baseline"), _drawn_cell("jittor", "baseline", 1400.0)]
    fig = T.figure(cells, "unet3d")
    fig.canvas.draw()
    torch_ax, jittor_ax = fig.axes[0], fig.axes[1]
    # the worker's scale on both: its curve's top, with a band for the legend where there is one
    assert torch_ax.get_ylim() == pytest.approx((0, 900 * T.MARGIN))
    assert jittor_ax.get_ylim() == pytest.approx((0, 900 * T.HEADROOM))
    twin = next(ax for ax in fig.axes if ax.bbox.bounds == jittor_ax.bbox.bounds
                and ax is not jittor_ax)  # fmt: skip
    assert twin.get_ylim()[1] == pytest.approx(1400 * T.HEADROOM)
    assert max(twin.get_lines()[0].get_ydata()) == 1400
    assert jittor_ax.get_title() == "jittor baseline: the whole cell\npeak 900 MiB in first step"
    assert not jittor_ax.texts  # nothing written inside the panel for the legend to cover
    legend = jittor_ax.get_legend().get_window_extent()
    for ax in (jittor_ax, twin):
        for line in ax.get_lines():
            top = ax.transData.transform((0, max(line.get_ydata())))[1]
            assert top < legend.y0, line.get_label()
