"""Launching and watching one cell's workers: a fresh process (a process per rank where the
framework runs one) in a process group of its own, its command line and environment, ended at
its timeout or over the memory cap with its whole group, sampled for the timeline, and the
framework's memory view of one more step (--trace). How each ending becomes a Record:
membench.cells.worker_outcome.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from membench import file_rules, registry
from membench.cells.worker_outcome import outcome, with_life_peak
from membench.environment import REPO_ROOT, detected_device, host_environment
from membench.instruments import memory_cap, timeline
from membench.interpreters import InterpreterError, framework_python
from membench.measure import distributed
from membench.metrics import PEAK_HOST_RSS_BYTES
from membench.records import Cell, ProbeBudget, Record, timestamp
from membench.store_lock import held_fds

# The names the run's options have in a worker's environment, where its record (which keeps
# every MEMBENCH_ variable) says what it ran under; of these the worker itself reads only a
# capacity probe's budget (membench.records.ProbeBudget), whose device share its framework
# imposes.
MEMORY_CAP_ENV = memory_cap.ENV
TIMELINE_ENV = "MEMBENCH_TIMELINE"
TRACE_ENV = "MEMBENCH_TRACE"


@dataclass(frozen=True)
class WorkerOptions:
    """The run's options that each cell's worker is launched and watched with, passed down to
    every launch (never through this process's environment: a worker's own gets them)."""

    # resident bytes the cell's processes may hold (--memory-cap; None: the default, computed
    # at each launch from the memory available then)
    memory_cap: float | None = None
    timeline: bool = False  # sample each cell's memory from outside its worker (--timeline)
    # after each measured cell, a worker of its own runs a step under the framework's own
    # memory view, its files in the store's TRACES folder (--trace; local runs only)
    trace: bool = False
    # a capacity probe's budget: its device share imposed by the worker's framework, and
    # kept in the probe's record
    budget: ProbeBudget | None = None
    # more of the workers' environment (a release's MEMBENCH_STACK, which its records carry)
    env: Mapping[str, str] = field(default_factory=dict)

    def cap(self) -> float:
        """The memory cap in force for a launch now."""
        return memory_cap.cap_bytes(self.memory_cap)

    def worker_env(self) -> dict[str, str]:
        """These options in a worker's environment (a record written without a worker names
        them too: host_environment's extra_env)."""
        env = dict(self.env)
        if self.memory_cap is not None:
            env[MEMORY_CAP_ENV] = f"{self.memory_cap:.0f}"
        if self.timeline:
            env[TIMELINE_ENV] = "1"
        if self.trace:
            env[TRACE_ENV] = "1"
        if self.budget:
            env.update(self.budget.env())
        return env


DEFAULT_OPTIONS = WorkerOptions()


def _worker_env(options: WorkerOptions = DEFAULT_OPTIONS) -> dict[str, str]:
    env = {**os.environ, **options.worker_env()}
    # The worker must import this checkout's membench and models, wherever we were started.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def rank_processes(cell: Cell) -> int:
    """Worker processes the cell takes: its world size, or one where one process drives
    all the cell's devices (a backend that cannot load here: the worker says why)."""
    if cell.world_size == 1:
        return 1
    try:
        backend = registry.load_backend(cell.framework)
    except (ImportError, AttributeError):
        return 1
    return 1 if backend.one_process_drives_ranks else cell.world_size


# Seconds past its cell's timeout after which a worker ends itself (the runner, if alive,
# has stopped it by then: this is for a worker whose runner is gone).
WORKER_DEADLINE_GRACE = 30.0
POLL_SECONDS = 0.2  # how often the runner looks at a worker's memory and time


def worker_command(
    python: str, cell: Cell, out: Path, timeout: float, marks: Path | None = None,
    trace_dir: Path | None = None,
) -> list[str]:  # fmt: skip
    """A worker's command line: it ends with this runner and by its own deadline, marks its
    phases in `marks` where given (the timeline's), and writes the framework's memory view of
    one more step into trace_dir where given (--trace)."""
    return [
        python, "-m", "membench.measure.worker", "--cell", cell.to_json(), "--out", str(out),
        "--parent", str(os.getpid()), "--deadline", f"{timeout + WORKER_DEADLINE_GRACE:.0f}",
        *(["--marks", str(marks)] if marks else []),
        *(["--trace-dir", str(trace_dir)] if trace_dir else []),
    ]  # fmt: skip


def record_out(log_path: Path) -> Path:
    """Where a worker writes its record: a name no other process uses."""
    return log_path.with_name(f"{log_path.stem}.{os.getpid()}-{secrets.token_hex(4)}.record.json")


def wait_capped(
    proc: subprocess.Popen, timeout: float, cap: float, watch: memory_cap.GroupWatch | None = None
) -> tuple[int | None, str]:
    """The worker's exit status, or None and why the runner must end it: past its timeout
    ("timeout"), or its process group's resident memory over the cap (the reason). watch
    keeps what the group's other processes held at their highest."""
    watch = watch or memory_cap.GroupWatch(proc.pid)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return proc.wait(timeout=POLL_SECONDS), ""
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() > deadline:
            return None, "timeout"
        if (resident := watch.over(cap)) is not None:
            return None, memory_cap.over_cap_reason(resident, cap)


def run_worker(
    cell: Cell, log_path: Path, timeout: float, timeline_path: Path | None = None,
    python: str | None = None, options: WorkerOptions = DEFAULT_OPTIONS,
) -> Record:  # fmt: skip
    """Measure one cell in a fresh process (W processes for a cell of W ranks whose
    framework runs a process per rank); never raises for what happens inside it. With
    timeline_path, the worker's memory is sampled from here meanwhile
    (membench.instruments.timeline) and written there; the record names the file and keeps its
    summary. python: the interpreter of the worker (a framework release's environment), else the
    framework's own. options: its memory cap and environment (the timeline: timeline_path)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    out = record_out(log_path)
    try:
        python = python or framework_python(cell.framework)
    except InterpreterError as exc:
        return Record(cell, "error", str(exc))
    if rank_processes(cell) > 1:
        return run_ranks(cell, python, log_path, timeout, timeline_path, options)
    marks = out.with_suffix(".marks") if timeline_path else None
    cmd = worker_command(python, cell, out, timeout, marks)
    cap = options.cap()
    started = timestamp()
    t0 = time.monotonic()
    try:
        with file_rules.open_for_writing(log_path) as log:
            watch = memory_cap.GroupWatch()
            proc, rc, why, sampler = _run_capped(
                cmd, log, timeout, cap, timeline_path, watch, options
            )
        if memory_cap.is_cap_reason(why):
            out.unlink(missing_ok=True)
            record = Record(cell, "oom", why, environment={memory_cap.CAP_FIELD: cap})
        else:
            record = with_life_peak(outcome(cell, rc, out, log_path, timeout, proc.pid, t0), watch)
        record = _stamped(record, started, t0, options)
        return _with_timeline(record, sampler, t0, marks, timeline_path)
    finally:
        out.unlink(missing_ok=True)  # read above, or left by a worker whose runner was stopped
        if marks is not None:
            marks.unlink(missing_ok=True)


def _run_capped(
    cmd: list[str], log: IO[str], timeout: float, cap: float, timeline_path: Path | None = None,
    watch: memory_cap.GroupWatch | None = None, options: WorkerOptions = DEFAULT_OPTIONS,
) -> tuple[subprocess.Popen, int | None, str, timeline.GroupSampler | None]:  # fmt: skip
    """A worker started in a process group of its own (holding the store's lock; the options'
    environment in its own), waited for within its timeout and the memory cap, its group
    killed when either ends it or when we are interrupted; sampled meanwhile where a timeline
    is wanted. (the process, its exit status or None, why the runner ended it, the stopped
    sampler or None)"""
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=_worker_env(options), start_new_session=True,
        pass_fds=held_fds(),  # the store's lock: held while the worker lives
    )  # fmt: skip
    try:
        with _in_flight(proc):
            if watch is not None:
                watch.pgid = proc.pid
            with _sampling(proc.pid, timeline_path) as sampler:
                rc, why = wait_capped(proc, timeout, cap, watch)
        if rc is None:
            _kill_group(proc)
    except BaseException:  # interrupted (or no sampler): take the worker down with us
        _kill_group(proc)
        raise
    return proc, rc, why, sampler


# Workers in flight, whichever thread waits on them: an interrupt reaches the main thread
# only, and workers that other threads wait on (searches side by side) must end with it,
# their threads raising KeyboardInterrupt instead of recording a killed worker.
_LIVE: dict[subprocess.Popen, int] = {}  # each worker -> the process group it is in
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()


@contextmanager
def _in_flight(*procs: subprocess.Popen) -> Iterator[None]:
    """Workers (a cell's ranks together) a stop ends, whichever thread waits on them; the
    block raises KeyboardInterrupt where a stop was taken before they were seen or while it
    ran (a killed worker is no record)."""
    with _LIVE_LOCK:
        _LIVE.update(dict.fromkeys(procs, procs[0].pid))  # the first leads the group
        stopped = _STOPPING.is_set()
    try:
        if stopped:
            raise KeyboardInterrupt("the run was stopped")
        yield
        if _STOPPING.is_set():
            raise KeyboardInterrupt("the run was stopped")
    finally:
        with _LIVE_LOCK:
            for proc in procs:
                _LIVE.pop(proc, None)


def kill_live_workers() -> None:
    """End every worker in flight, with the process group it is in (a cell's ranks share
    one); a worker started after this ends at once (until allow_workers)."""
    with _LIVE_LOCK:
        _STOPPING.set()
        live = dict(_LIVE)
    for proc, group in live.items():
        if proc.poll() is None:  # recorded when it started: never another process's group
            distributed.kill_group(group)


def workers_stopped() -> bool:
    """Whether a stop was taken (kill_live_workers) and not lifted since."""
    return _STOPPING.is_set()


def allow_workers() -> None:
    """Workers may start again (a new run's engine)."""
    _STOPPING.clear()


@contextmanager
def _sampling(pgid: int, path: Path | None) -> Iterator[timeline.GroupSampler | None]:
    """The timeline's sampler over the block, where a timeline is wanted (None elsewhere);
    stopped when the block ends, its samples complete."""
    if path is None:
        yield None
        return
    sampler = timeline.GroupSampler(pgid, device=_device_reader(pgid)).start()
    try:
        yield sampler
    finally:
        sampler.stop()


def _device_reader(pid: int) -> Callable[[], int | None] | None:
    """NVML's reading of the worker's device memory, on GPU hosts (None elsewhere, or where
    NVML does not start: the timeline then holds host memory only)."""
    if detected_device() != "cuda":
        return None
    try:
        from membench.instruments.probes import NvmlReader

        return NvmlReader(pid=pid).process_used
    except Exception:
        return None


def _with_timeline(
    record: Record, sampler: timeline.GroupSampler | None, launched: float,
    marks: Path | None, path: Path | None,
) -> Record:  # fmt: skip
    """The record with its timeline written beside it and summarised in it (unchanged where
    there is none: no timeline wanted, or no sample taken). The measured steps' peak is set
    against the worker's VmHWM (rank 0's in a cell of several processes)."""
    step_phases = str(record.environment.pop("step_phases_marked", ""))
    if path is None or sampler is None or not sampler.samples.t:
        return record
    samples = sampler.samples
    found = [(launched, timeline.phase_marks.LAUNCH)]
    if marks is not None:
        found += timeline.phase_marks.read_marks(marks)
    own = record.ranks[0] if record.ranks else record.metrics
    summary = timeline.summarise(samples, found, own.get(PEAK_HOST_RSS_BYTES))
    try:
        timeline.write(path, samples, found, summary, step_phases, origin=launched)
    except Exception as exc:  # the record is what matters: keep it, say why it has no timeline
        record.environment["timeline_error"] = f"{type(exc).__name__}: {exc}"[:1000]
        return record
    for key, metric in timeline.METRICS.items():
        if key in summary:
            record.metrics[metric] = float(summary[key])
    record.environment["timeline"] = {
        "file": f"{path.parent.name}/{path.name}",
        "interval_seconds": samples.interval,
        "samples": summary["samples"],
        "peak_phase": summary.get("peak_phase", ""),
        "peak_step_phase": summary.get("peak_step_phase", ""),
        "step_phases_marked": step_phases,
    }
    return record


def _stamped(record: Record, started: str, t0: float, options: WorkerOptions) -> Record:
    """A record the worker did not write (killed, timed out, crashed) gets the runner's start,
    wall time and host environment (machine, CPU, commit): what names where and by which
    code the cell ran, as a worker's own record does."""
    if not record.started_at:
        record.started_at, record.wall_seconds = started, time.monotonic() - t0
        record.environment = {
            **host_environment(options.worker_env()), "device": detected_device(),
            **record.environment,
        }  # fmt: skip
    return record


def run_ranks(
    cell: Cell, python: str, log_path: Path, timeout: float, timeline_path: Path | None = None,
    options: WorkerOptions = DEFAULT_OPTIONS,
) -> Record:  # fmt: skip
    """A cell of W ranks: W workers started together (membench.measure.distributed), each ending
    classified by the one-process rules, then merged into the cell's Record. The timeline
    holds rank 0's memory and, apart, the other ranks' (the rest of the group), marked by
    rank 0."""
    out = record_out(log_path)
    outs = [distributed.rank_out(out, r) for r in range(cell.world_size)]
    marks = out.with_suffix(".marks") if timeline_path else None
    try:
        return _run_ranks(cell, python, log_path, timeout, outs, marks, timeline_path, options)
    finally:
        for path in outs:  # read, or left by ranks whose runner was stopped
            path.unlink(missing_ok=True)
        if marks is not None:
            marks.unlink(missing_ok=True)


def _run_ranks(
    cell: Cell, python: str, log_path: Path, timeout: float, outs: list[Path],
    marks: Path | None, timeline_path: Path | None, options: WorkerOptions,
) -> Record:  # fmt: skip
    def cmd(rank: int) -> list[str]:
        return worker_command(python, cell, outs[rank], timeout, marks if rank == 0 else None)

    cap = options.cap()  # one cap for the watch and the record
    started = timestamp()
    t0 = time.monotonic()
    with file_rules.open_for_writing(log_path) as log:
        procs = distributed.launch_ranks(
            cmd, _worker_env(options), cell.world_size, log, pass_fds=held_fds()
        )
        try:
            with _in_flight(*procs), _sampling(procs[0].pid, timeline_path) as sampler:
                rcs, killed = distributed.wait_ranks(procs, timeout, cap=cap)
        except BaseException:  # interrupted (or no sampler): take the ranks down with us
            distributed.kill_ranks(procs)
            raise
    if memory_cap.is_cap_reason(killed):
        for path in outs:
            path.unlink(missing_ok=True)
        capped = Record(cell, "oom", killed, environment={memory_cap.CAP_FIELD: cap})
        record = _stamped(capped, started, t0, options)
        return _with_timeline(record, sampler, t0, marks, timeline_path)
    records = []
    for rank, (rc, proc) in enumerate(zip(rcs, procs, strict=True)):
        if rc is None and killed != "timeout":  # alive when a peer's end stopped the cell
            record = Record(cell, "error", killed, environment={"stopped_by_runner": True})
        else:
            record = outcome(cell, rc, outs[rank], log_path, timeout, proc.pid, t0)
        records.append(record)
    record = _stamped(distributed.merge_ranks(cell, records), started, t0, options)
    return _with_timeline(record, sampler, t0, marks, timeline_path)


def _kill_group(proc: subprocess.Popen) -> None:
    distributed.kill_group(proc.pid)
    proc.wait()


def run_trace(
    cell: Cell, trace_dir: Path, log_path: Path, timeout: float,
    options: WorkerOptions = DEFAULT_OPTIONS,
) -> dict[str, object]:  # fmt: skip
    """The framework's own memory view of one step of the cell (`--trace`), by a worker of its
    own after the measured one (its log appended to the cell's): the files it wrote, or why
    there are none. Its end, whatever it is, never changes the measured record."""
    out = record_out(log_path).with_suffix(".trace.json")
    try:
        cmd = worker_command(framework_python(cell.framework), cell, out, timeout, None, trace_dir)
    except InterpreterError as exc:
        return {"error": str(exc)}
    with file_rules.open_for_writing(log_path, append=True) as log:
        _, rc, why, _ = _run_capped(cmd, log, timeout, options.cap(), options=options)
    try:
        return json.loads(out.read_text())
    except (OSError, ValueError):
        return {"error": why or f"the view's worker ended with status {rc} without a result"}
    finally:
        out.unlink(missing_ok=True)


TRACES = "traces"  # the store's folder of the frameworks' memory views (--trace)
