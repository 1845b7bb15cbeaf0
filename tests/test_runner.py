"""The runner and worker against the test-double framework: every ending classified."""

import os
import signal
import subprocess
import sys
import time

import pytest

from membench.cells import supervision, worker_outcome
from membench.records import Cell, Record

from .conftest import REPO


def fake_cell(strategy="baseline", batch=1):
    return Cell("fake-work", "fake", strategy, batch, "smoke")


def fake_cli_run(store_dir, *selection: str) -> list[str]:
    """`membench run` over the fake framework's workload, smoke preset."""
    return [sys.executable, "-m", "membench", "run", "-w", "fake-work", "-f", "fake",
            "-p", "smoke", "--store", str(store_dir), *selection]  # fmt: skip


def run_one(store, behaviour, monkeypatch, timeout=60.0, strategy="baseline") -> Record:
    monkeypatch.setenv("FAKE_BEHAVIOUR", behaviour)
    return supervision.run(
        [fake_cell(strategy)], store, supervision.RunControl(timeout=timeout)
    ).records[0]


def test_step_that_allocates_200mb_peaks_that_much_above_baseline(
    fake_framework, store, monkeypatch
):
    record = run_one(store, "alloc", monkeypatch)
    assert record.status == "ok", record.reason
    # 200 MiB touched; the kernel's RSS counters are batched per CPU (tens of pages), so
    # the reading is held to the 200 MB (decimal) the allocation exceeds by 9.7 MB.
    assert record.metrics["peak_host_rss_delta_bytes"] >= 200e6
    assert record.metrics["peak_host_rss_bytes"] >= record.metrics["host_rss_baseline_bytes"]
    assert len(record.step_times) == 3  # the smoke preset's measured steps
    assert record.environment["strategy_notes"] == {"behaviour": "alloc"}


def test_hanging_worker_ends_as_timeout(fake_framework, store, monkeypatch):
    t0 = time.monotonic()
    record = run_one(store, "hang", monkeypatch, timeout=3)
    assert record.status == "timeout"
    assert "3 s" in record.reason
    assert time.monotonic() - t0 < 30
    assert store.get(record.cell).status == "timeout"
    # the runner names where and by which code the cell ran, as a worker's record does
    env = store.get(record.cell).environment
    assert env["git"]["commit"] and env["machine"] and env["cpu"] and env["device"] == "cpu"
    assert 3 <= record.wall_seconds < 30


def test_raising_worker_ends_as_error_with_its_message(fake_framework, store, monkeypatch):
    record = run_one(store, "raise", monkeypatch)
    assert record.status == "error"
    assert "ValueError: boom from the step" in record.reason
    assert "machine" in record.environment  # where it failed is still recorded


def test_framework_out_of_memory_ends_as_oom(fake_framework, store, monkeypatch):
    record = run_one(store, "oom", monkeypatch)
    assert record.status == "oom"
    assert "out of memory" in record.reason


def test_killed_worker_ends_as_error_naming_the_signal(fake_framework, store, monkeypatch):
    record = run_one(store, "crash", monkeypatch)
    assert record.status == "error"
    assert "SIGKILL" in record.reason


KERNEL_LOG = """\
[24057.077778] Out of memory: Killed process 3830 (python) total-vm:27414212kB, anon-rss:24284000kB
[24100.000001] oom-kill:constraint=CONSTRAINT_NONE,task=python,pid=4211,uid=0
[24759.025287] Out of memory: Killed process 4211 (python) total-vm:27415236kB, anon-rss:24309628kB
"""


def test_the_kernel_logs_oom_kill_is_found_by_pid_and_time():
    line = worker_outcome.oom_kill_line(KERNEL_LOG, 4211, since=24700.0)
    assert line.startswith("Out of memory: Killed process 4211 (python)")
    assert worker_outcome.oom_kill_line(KERNEL_LOG, 421, since=0.0) is None  # not a prefix match
    # a pid the kernel reused: its kill happened before this worker started
    assert worker_outcome.oom_kill_line(KERNEL_LOG, 3830, since=24700.0) is None


def test_a_worker_the_oom_killer_took_ends_as_oom(tmp_path):
    cell, log = fake_cell(), tmp_path / "cell.log"
    log.write_text("step 1\n")
    args = (cell, -signal.SIGKILL, tmp_path / "none.json", log, 60.0, 4211, 24700.0)
    record = worker_outcome.outcome(*args, read_kernel_log=lambda: KERNEL_LOG)
    assert record.status == "oom"
    assert "Killed process 4211" in record.reason
    other = worker_outcome.outcome(*args[:5], 5000, 24700.0, read_kernel_log=lambda: KERNEL_LOG)
    assert other.status == "error" and "SIGKILL" in other.reason


def test_refused_strategy_ends_as_unsupported(fake_framework, store, monkeypatch):
    record = run_one(store, "alloc", monkeypatch, strategy="infer-half")
    assert record.status == "unsupported"
    assert record.reason == "the fake framework has no half precision"


def test_finished_cells_are_not_measured_again(fake_framework, store, monkeypatch, tmp_path):
    counter = tmp_path / "built"
    monkeypatch.setenv("FAKE_COUNTER", str(counter))
    monkeypatch.setenv("FAKE_BEHAVIOUR", "count")
    cells = [fake_cell("baseline", b) for b in (1, 2)]
    first = supervision.run(cells, store)
    assert (first.measured, first.reused) == (2, 0)
    second = supervision.run(cells + [fake_cell("baseline", 3)], store)
    assert (second.measured, second.reused) == (1, 2)
    assert counter.read_text().split("\n")[:-1] == ["baseline 1", "baseline 2", "baseline 3"]
    assert supervision.run(cells, store, supervision.RunControl(fresh=True)).measured == 2


def test_failed_cells_are_retried_unless_kept(fake_framework, store, monkeypatch):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "raise")
    supervision.run([fake_cell()], store)
    monkeypatch.setenv("FAKE_BEHAVIOUR", "count")
    kept = supervision.RunControl(retry_failed=False)
    assert supervision.run([fake_cell()], store, kept).records[0].status == "error"
    assert supervision.run([fake_cell()], store).records[0].status == "ok"


def test_corrupt_stored_record_is_measured_again(fake_framework, store, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "count")
    store.root.mkdir(parents=True)
    store.path(fake_cell()).write_text("{half a record")
    result = supervision.run([fake_cell()], store)
    assert result.measured == 1 and result.records[0].status == "ok"
    assert "corrupt record file" in capsys.readouterr().err


def test_interrupted_run_resumes_without_remeasuring(fake_framework, tmp_path):
    """Ctrl-C during a CLI run keeps the finished cells; the same command resumes."""
    counter = tmp_path / "built"
    store_dir = tmp_path / "store"
    env = dict(
        os.environ, FAKE_BEHAVIOUR="count", FAKE_STEP_SECONDS="0.5", FAKE_COUNTER=str(counter)
    )
    cmd = fake_cli_run(store_dir, "-s", "baseline")
    # Ctrl-C reaches the run as from a terminal whatever this process's own SIGINT: a test
    # session started as a background job of a script ignores it, and a child inherits that
    # (Python then installs no KeyboardInterrupt), so the run went on to its end
    kept = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    finally:
        signal.signal(signal.SIGINT, kept)
    first = store_dir / f"{fake_cell('baseline', 1).key}.json"
    deadline = time.monotonic() + 60
    while not first.exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "first cell never finished"
        time.sleep(0.05)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, f"ended {time.monotonic() - sent:.1f} s after the signal\n{out}"
    assert "run the same command again to resume" in " ".join(out.split())
    done_before = sorted(p.name for p in store_dir.glob("*.json"))
    assert 1 <= len(done_before) < 3

    rerun = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"kept from an earlier run {len(done_before)}" in rerun.stdout
    built = counter.read_text().split("\n")[:-1]
    # each cell built once, except the one in flight at the interrupt (built, never recorded)
    assert sorted(set(built)) == ["baseline 1", "baseline 2", "baseline 3"]
    assert built.count("baseline 1") == 1
    assert len(list(store_dir.glob("*.json"))) == 3


def test_cli_run_prints_the_table(fake_framework, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "count")
    out = subprocess.run(
        fake_cli_run(tmp_path / "s", "-s", "baseline,infer-half", "-b", "2"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "unsupported" in out.stdout and "no half precision" in out.stdout
    assert "samples/s" in out.stdout
    assert "measuring" in out.stderr or "fake-work--fake--baseline--bs2: ok" in out.stderr


@pytest.mark.parametrize("content", ["{not json", '{"cell": {}}'])
def test_cli_show_reports_a_corrupt_file(tmp_path, capsys, content):
    from membench.cli import main

    (tmp_path / "x.json").write_text(content)
    assert main(["show", str(tmp_path)]) == 1
    assert str(tmp_path / "x.json") in capsys.readouterr().out.replace("\n", "")


def test_no_cell_starts_after_the_deadline(fake_framework, store, monkeypatch):
    import time

    cells = [fake_cell(batch=b) for b in (1, 2)]
    late = supervision.run(cells, store, supervision.RunControl(deadline=time.monotonic() - 1))
    assert late.measured == 0 and late.deferred == cells and not list(store.records())
    done = supervision.run(cells, store, supervision.RunControl(deadline=time.monotonic() + 600))
    assert done.measured == 2 and done.deferred == []
