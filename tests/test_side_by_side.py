"""Capacity searches side by side on one machine: each probe within its own budget finds what it
finds alone, its record says it was not alone (its speed is not published), and an interrupt
ends every worker in flight, whichever thread waits on it."""

import threading
import time

import pytest

from membench import cli
from membench.capacity.run import beside
from membench.capacity.search import answer_speed
from membench.cells.engines import LocalEngine
from membench.cells.supervision import RunControl
from membench.cells.worker_launch import _LIVE, WorkerOptions
from membench.metrics import BUSY_SHARE, SIDE_BY_SIDE_ENV, THROUGHPUT, measured_alone
from membench.records import Cell, Record, load_capacity_results

MIB = 2**20


def test_workers_side_by_side_are_marked_and_share_the_hosts_cap():
    options = beside(WorkerOptions(memory_cap=None), 2)
    assert options.env[SIDE_BY_SIDE_ENV] == "2"
    assert options.memory_cap == pytest.approx(WorkerOptions().cap() / 2, rel=0.05)
    given = beside(WorkerOptions(memory_cap=3 * 2**30), 4)  # a cap given is the cell's own
    assert given.memory_cap == 3 * 2**30


def test_an_answers_speed_comes_from_its_runs_measured_alone():
    def run(speed: float, shared: str | None) -> Record:
        env = {"env": {SIDE_BY_SIDE_ENV: shared} if shared else {}}
        return Record(Cell("w", "f", "s", 8, "p"), "ok", "", {THROUGHPUT: speed}, environment=env)

    assert not measured_alone(run(1, "5").environment) and measured_alone(run(1, "1").environment)
    assert answer_speed([run(10.0, None), run(12.0, None), run(99.0, "5")])[0] == 11.0
    assert answer_speed([run(99.0, "2"), run(98.0, "2")])[0] is None


@pytest.mark.slow
def test_searches_side_by_side_find_the_answers_and_peaks_of_one_by_one(
    fake_framework, monkeypatch, tmp_path
):
    """Two searches of a step that touches 16 MiB a sample, within the peak at batch 6 plus
    8 MiB: one by one and then two at a time, under the host's cap shared out, both end at
    6; each batch's peak (the worker's own reading; the runner's sampled life peak can miss a
    step this short) is the same within 2 MiB, and the side-by-side answers carry no speed."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "per-sample")
    monkeypatch.setenv("FAKE_MIB_PER_SAMPLE", "16")
    monkeypatch.setattr("membench.environment.git_commit", lambda: {"commit": "c0", "dirty": False})
    monkeypatch.setattr("membench.publish.asv_run.run_asv", lambda env, regexes: 0)
    from membench.cells.supervision import run
    from membench.records import RecordStore

    at_six = run([Cell("fake-work", "fake", "baseline", 6, "smoke")], RecordStore(tmp_path / "s"))
    budget = at_six.records[0].metrics["life_peak_host_rss_bytes"] + 8 * MIB
    args = ["capacity", "-w", "fake-work", "-f", "fake", "-s", "baseline,checkpoint",
            "-p", "smoke", "--budget", f"{budget / MIB:.0f}MiB", "--bisect"]  # fmt: skip
    found = {}
    for n in (1, 2):
        monkeypatch.setattr("membench.paths.RESULTS", tmp_path / f"results-{n}")
        assert cli.main([*args, "--side-by-side", str(n)]) == 0
        (path,) = (tmp_path / f"results-{n}").glob("capacity/*/smoke-*/capacity.json")
        found[n] = {r.strategy: r for r in load_capacity_results(path)}
    probes = {n: RecordStore(next((tmp_path / f"results-{n}").glob("capacity/*/smoke-*"))
                             / "probes").scan()[0] for n in (1, 2)}  # fmt: skip
    peaks = {n: {(r.cell.strategy, r.cell.batch_size): r.metrics["peak_host_rss_bytes"]
                 for r in probes[n]} for n in (1, 2)}  # fmt: skip
    assert len(peaks[1].keys() & peaks[2].keys()) >= 10
    for key in peaks[1].keys() & peaks[2].keys():
        assert abs(peaks[1][key] - peaks[2][key]) < 2 * MIB, (key, peaks)
    for strategy in ("baseline", "checkpoint"):
        alone, beside_ = found[1][strategy], found[2][strategy]
        assert alone.largest_fit == beside_.largest_fit == 6
        # alone, a speed unless the host was busy; side by side, none whatever the host
        busy = (alone.foreign_cpu_share_at_fit or 0) > BUSY_SHARE
        assert (alone.throughput_at_largest_fit is not None) or busy
        assert beside_.throughput_at_largest_fit is None
    marks = {n: {r.environment["env"].get(SIDE_BY_SIDE_ENV) for r in probes[n]} for n in (1, 2)}
    assert marks == {1: {None}, 2: {"2"}}


@pytest.mark.slow
def test_stopping_the_local_engine_ends_a_worker_another_thread_waits_on(
    fake_framework, monkeypatch, store
):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "hang")
    engine = LocalEngine()
    ended: list = []
    cell = Cell("fake-work", "fake", "baseline", 1, "smoke")

    def wait() -> None:
        try:
            ended.append(engine.run([cell], store, RunControl(timeout=120)))
        except KeyboardInterrupt as exc:
            ended.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + 60
    while not _LIVE and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _LIVE, "the worker never started"
    stopped = time.monotonic()
    engine.stop()
    waiter.join(30)
    assert not waiter.is_alive() and time.monotonic() - stopped < 30
    # the waiting thread raises as an interrupted run does: a killed worker is no record
    assert isinstance(ended[0], KeyboardInterrupt) and not _LIVE and store.get(cell) is None
    with pytest.raises(KeyboardInterrupt):  # no further cell starts
        engine.run([cell], store)
    LocalEngine()  # a new engine's run may start workers again
    monkeypatch.setenv("FAKE_BEHAVIOUR", "alloc")
    assert LocalEngine().run([cell], store).records[0].status == "ok"


def test_a_stop_ends_a_cells_ranks_another_thread_waits_on(tmp_path, monkeypatch):
    """A cell of two ranks (one process group, rank 0 leading it) waited on by another thread:
    a stop kills the group, that thread raises as an interrupted run does, and no rank lives
    on."""
    import sys

    from membench.cells import worker_launch

    monkeypatch.setattr(
        worker_launch,
        "worker_command",
        lambda *a, **k: [sys.executable, "-c", "import time; time.sleep(600)"],
    )
    launched: list = []
    real_launch = worker_launch.distributed.launch_ranks

    def launch(*args, **kwargs):
        launched.extend(real_launch(*args, **kwargs))
        return launched

    monkeypatch.setattr(worker_launch.distributed, "launch_ranks", launch)
    cell = Cell("resnet50", "torch", "baseline", 2, "smoke", world_size=2)
    ended: list = []

    def wait() -> None:
        try:
            ended.append(worker_launch.run_ranks(cell, sys.executable, tmp_path / "log", 300))
        except KeyboardInterrupt as exc:
            ended.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + 30
    while len(_LIVE) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_LIVE) == 2, "the ranks never started"
    try:
        worker_launch.kill_live_workers()
        waiter.join(30)
        assert not waiter.is_alive() and isinstance(ended[0], KeyboardInterrupt)
        assert all(p.poll() is not None for p in launched) and not _LIVE
    finally:
        worker_launch.allow_workers()
        for p in launched:
            p.kill()
