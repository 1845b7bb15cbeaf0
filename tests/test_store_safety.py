"""The store holds: one writer, no orphan workers, a memory cap per cell, a full disk loses
nothing finished. Real `membench run` processes and real workers of the fake framework."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from membench import records
from membench.cells import supervision, worker_launch
from membench.cli import main
from membench.instruments import lifeline
from membench.records import Cell
from membench.store_lock import StoreLockedError, held_fds, store_lock
from tests.processes import workers_of

from .conftest import REPO


def fake_cli_run(store: Path, *selection: str) -> list[str]:
    return [sys.executable, "-m", "membench", "run", "-w", "fake-work", "-f", "fake",
            "-p", "smoke", "-s", "baseline", "--store", str(store), *selection]  # fmt: skip


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def lock_holder(store: Path) -> str:
    try:
        return (store / ".lock").read_text().strip()
    except OSError:
        return ""


# -- one writer per store --------------------------------------------------------------------
def test_a_second_run_on_a_store_refuses_naming_the_holder_or_waits(fake_framework, tmp_path):
    store = tmp_path / "store"
    env = dict(os.environ, FAKE_BEHAVIOUR="count", FAKE_STEP_SECONDS="0.3")
    first = subprocess.Popen(
        fake_cli_run(store), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        wait_for(lambda: lock_holder(store) == str(first.pid), 60, "the first run never locked")
        second = subprocess.run(
            fake_cli_run(store), cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )
        assert second.returncode == 2, second.stdout + second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"in use by the run of PID {first.pid}" in lines[0]
        assert "--wait" in lines[0]
        waiting = subprocess.run(
            fake_cli_run(store, "--wait"), cwd=REPO, env=env, capture_output=True, text=True,
            timeout=180,
        )  # fmt: skip
        assert first.wait(timeout=120) == 0
    finally:
        first.kill()
    assert waiting.returncode == 0, waiting.stdout + waiting.stderr
    assert "waiting" in waiting.stdout
    # it started after the first had finished every cell: it kept them all
    assert "kept from an earlier run 3" in waiting.stdout
    stored = [records.read_record(p) for p in sorted(store.glob("*.json"))]
    assert [r.status for r in stored] == ["ok"] * 3, [r.reason for r in stored]
    assert not list((store / "logs").glob("*.record.json"))  # no worker's record left behind


def test_workers_inherit_the_store_lock(tmp_path):
    """A process the run started keeps the store locked after the run let go of it."""
    with store_lock(tmp_path):
        child = subprocess.Popen(["sleep", "30"], pass_fds=held_fds())
    try:
        with pytest.raises(StoreLockedError, match=f"in use by the run of PID {os.getpid()}"):
            with store_lock(tmp_path):
                pass
    finally:
        child.kill()
        child.wait()
    with store_lock(tmp_path):  # free once the last holder ended
        pass


def test_worker_records_have_names_no_other_runner_uses(tmp_path):
    log = tmp_path / "logs" / "cell.log"
    assert worker_launch.record_out(log) != worker_launch.record_out(log)
    assert str(os.getpid()) in worker_launch.record_out(log).name


def test_an_interrupted_runner_leaves_no_worker_record_behind(tmp_path, monkeypatch):
    """Stopped (Ctrl-C, a command's time limit) after its worker wrote its record but before
    reading it, the runner removes the file: a probe's logs held such a stray record once."""
    log = tmp_path / "logs" / "cell.log"

    def interrupted(cmd, *args, **kwargs):
        Path(cmd[cmd.index("--out") + 1]).write_text("{}")  # the worker got as far as its record
        raise KeyboardInterrupt

    monkeypatch.setattr(worker_launch, "_run_capped", interrupted)
    with pytest.raises(KeyboardInterrupt):
        worker_launch.run_worker(Cell("resnet50", "torch", "baseline", 1, "smoke"), log, 60)
    assert log.exists() and not list(log.parent.glob("*.record.json"))

    def ranks_interrupted(cell, python, log_path, timeout, outs, *args):
        for out in outs:  # every rank got as far as its record
            out.write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(worker_launch, "_run_ranks", ranks_interrupted)
    cell = Cell("resnet50", "torch", "baseline", 2, "smoke", world_size=2)
    with pytest.raises(KeyboardInterrupt):
        worker_launch.run_ranks(cell, sys.executable, log, 60)
    assert not list(log.parent.glob("*.json"))


# -- no orphans ------------------------------------------------------------------------------
def test_a_worker_does_not_outlive_its_killed_runner(fake_framework, tmp_path):
    store = tmp_path / "store"
    env = dict(os.environ, FAKE_BEHAVIOUR="hang")
    run = subprocess.Popen(
        fake_cli_run(store, "-b", "1"), cwd=REPO, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(lambda: workers_of(store), 60, "no worker started")
        (worker,) = workers_of(store)
        # the kernel's OOM killer picks a worker before anything else
        wait_for(lambda: Path(f"/proc/{worker.pid}/oom_score_adj").read_text().strip() == "1000",
                 30, "the worker never raised its oom_score_adj")  # fmt: skip
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=10)
        time.sleep(5)
        assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
        assert workers_of(store) == []
    finally:
        run.kill()
        for proc in workers_of(store):
            proc.kill()
    # the lock went with them: a resumed run takes the store
    with store_lock(store):
        pass


def test_a_worker_whose_runner_is_already_gone_exits_at_once(fake_framework, tmp_path):
    cell = Cell("fake-work", "fake", "baseline", 1, "smoke")
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "membench.measure.worker", "--cell", cell.to_json(), "--out",
           str(out), "--parent", "1"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=60)
    assert done.returncode == lifeline.ORPHANED and not out.exists()


def test_a_worker_enforces_its_own_deadline(fake_framework, tmp_path):
    """Even in native code holding Python's GIL (the alarm's default action is the kernel's)."""
    cell = Cell("fake-work", "fake", "baseline", 1, "smoke")
    env = dict(os.environ, FAKE_BEHAVIOUR="hold-gil", FAKE_STEP_SECONDS="120")
    cmd = [sys.executable, "-m", "membench.measure.worker", "--cell", cell.to_json(),
           "--out", str(tmp_path / "r.json"), "--deadline", "3"]  # fmt: skip
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGALRM
    assert time.monotonic() - t0 < 30


# -- the memory cap --------------------------------------------------------------------------
def test_a_cell_over_the_memory_cap_is_stopped_and_recorded_oom(fake_framework, tmp_path):
    store = tmp_path / "store"
    env = dict(os.environ, FAKE_BEHAVIOUR="leak", FAKE_MIB_PER_SAMPLE="150",
               FAKE_STEP_SECONDS="0.5")  # fmt: skip
    done = subprocess.run(
        fake_cli_run(store, "-b", "1", "--memory-cap", "300MiB"), cwd=REPO, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "memory cap per cell: 0.29 GiB" in done.stdout
    (record,) = [records.read_record(p) for p in store.glob("*.json")]
    assert record.status == "oom", record.reason
    assert "over the memory cap of 0.29 GiB" in record.reason
    assert record.environment["memory_cap_bytes"] == 300 * 2**20
    assert workers_of(store) == []


def test_an_oom_the_cap_ended_is_kept_under_that_cap_and_measured_again_under_a_larger_one(
    fake_framework, tmp_path
):
    """A run under a cap too small (`--memory-cap 300MiB`, or one given without its unit) and
    then another with a larger cap: the second measures the cell instead of keeping the first's
    `oom`, which said only that the cell needs more than 300 MiB."""
    store = tmp_path / "store"
    env = dict(os.environ, FAKE_BEHAVIOUR="leak", FAKE_MIB_PER_SAMPLE="150",
               FAKE_STEP_SECONDS="0.5")  # fmt: skip

    def run(cap: str) -> str:
        done = subprocess.run(
            fake_cli_run(store, "-b", "1", "--memory-cap", cap), cwd=REPO, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    run("300MiB")
    assert "kept from an earlier run 1" in run("300MiB")
    env["FAKE_BEHAVIOUR"] = "count"  # the cell's step now fits in any cap
    assert "measured 1, kept from an earlier run 0" in run("2GiB")
    (record,) = [records.read_record(p) for p in store.glob("*.json")]
    assert record.status == "ok", record.reason


def test_a_cap_ended_oom_is_measured_again_only_under_a_clearly_larger_cap(tmp_path):
    """The default cap follows the memory available at each launch: a cap a little larger than
    the one that ended a cell keeps its `oom` (else every resume would run the cell into the
    cap again); a quarter larger measures it again. Records from before the cap was stored
    say it where the run gave one (--memory-cap reached the worker's environment); for a
    cluster whose nodes compute their own default, only a cap the run gave counts."""
    from membench.cells.planning import reusable_record
    from membench.instruments.memory_cap import over_cap_reason

    store = records.RecordStore(tmp_path / "store")
    gib = 2**30
    cell = Cell("fake-work", "fake", "baseline", 1, "smoke")
    reason = over_cap_reason(2.1 * gib, 2 * gib)
    store.put(records.Record(cell, "oom", reason, environment={"memory_cap_bytes": 2 * gib}))
    assert reusable_record(cell, store, cap=2.4 * gib) is not None  # within the noise
    assert reusable_record(cell, store, cap=2.6 * gib) is None
    assert reusable_record(cell, store, cap=None) is not None
    old = records.Record(cell, "oom", reason, environment={"env": {"MEMBENCH_MEMORY_CAP": "1"}})
    store.put(old)
    assert reusable_record(cell, store, cap=2 * gib) is None
    store.put(records.Record(cell, "oom", "the framework ran out of memory"))
    assert reusable_record(cell, store, cap=100 * gib) is not None  # not the cap's
    control = supervision.RunControl(worker=worker_launch.WorkerOptions(memory_cap=3 * gib))
    assert supervision.resume_cap(control, "ray") == 3 * gib
    assert supervision.resume_cap(supervision.RunControl(), "ray") is None
    assert supervision.resume_cap(supervision.RunControl()) > 0  # this host's default now


def test_the_default_cap_is_a_share_of_the_available_memory(monkeypatch):
    from membench.instruments import memory_cap

    assert memory_cap.cap_bytes() == pytest.approx(0.8 * psutil.virtual_memory().available, 0.05)
    assert memory_cap.cap_bytes(2**30) == 2**30
    assert memory_cap.group_rss(os.getpgid(0)) >= psutil.Process().memory_info().rss


def test_pages_a_forked_process_shares_are_counted_once(tmp_path):
    """A 300 MiB parent that forks: RSS counts its pages twice, the cap judges by PSS."""
    from membench.instruments import memory_cap

    code = (
        "import os, time\n"
        "block = bytearray(300 * 2**20)\n"
        "for i in range(0, len(block), 4096): block[i] = 1\n"
        "os.fork(); time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        wait_for(lambda: len(memory_cap._group(proc.pid, Path("/proc"))) == 2
                 and memory_cap.group_rss(proc.pid) > 550 * 2**20, 30, "no fork")  # fmt: skip
        assert memory_cap.over_cap(proc.pid, 450 * 2**20) is None  # RSS says 600, PSS 300
        assert memory_cap.over_cap(proc.pid, 200 * 2**20) > 290 * 2**20
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# -- a full disk -----------------------------------------------------------------------------
def test_a_record_that_cannot_be_written_is_printed_and_the_run_stops(
    fake_framework, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "count")
    monkeypatch.chdir(tmp_path)

    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(records, "write_json_atomic", full)
    store = tmp_path / "store"
    argv = ["run", "-w", "fake-work", "-f", "fake", "-p", "smoke", "-s", "baseline",
            "-b", "1,2", "--store", str(store)]  # fmt: skip
    assert main(argv) == 1
    out, err = capsys.readouterr()
    (error,) = [x for x in err.splitlines() if x.startswith("membench")]  # after the progress
    assert "No space left on device" in error and "the record is printed above" in error
    (line,) = [x for x in out.splitlines() if x.startswith('{"cell"')]
    record = records.Record.from_dict(json.loads(line))  # the measurement, whole
    assert record.status == "ok" and record.cell.batch_size == 1 and record.step_times
    assert len(list((store / "logs").glob("*.log"))) == 1  # the run stopped: no second cell


def test_a_run_stops_before_a_cell_when_the_disk_is_full(
    fake_framework, tmp_path, monkeypatch, capsys
):
    import shutil

    monkeypatch.setattr(
        records.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9, 2**20)
    )
    store = tmp_path / "store"
    argv = ["run", "-w", "fake-work", "-f", "fake", "-p", "smoke", "-s", "baseline",
            "--store", str(store)]  # fmt: skip
    assert main(argv) == 1
    (error,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("membench")]
    assert "1 MiB free" in error and "run the same command again" in error
    assert not (store / "logs").exists()  # no worker was started
