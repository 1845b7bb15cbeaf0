"""Supervising the workers: one fresh worker process per cell (a process per rank where the
framework runs one), every ending classified, resumable.

A worker that hangs past its timeout is killed (its whole process group) and recorded as
`timeout`; one that goes over the memory cap is ended as `oom`; one that dies without writing
its record is `error` with its exit status and the tail of its log. Finished cells are kept in
a RecordStore, so an interrupted run resumes where it stopped (which cells, and which are kept
or refused without a worker: membench.cells.planning).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from membench import file_rules, registry
from membench.cells.planning import declared_refusal, refused_record, reusable_record
from membench.environment import REPO_ROOT, detected_device, host_environment
from membench.instruments import memory_cap, timeline
from membench.interpreters import InterpreterError, framework_python
from membench.measure import distributed
from membench.metrics import LIFE_METRIC, LIFE_OTHERS_METRIC, LIFE_OWN_METRIC, PEAK_HOST_RSS_BYTES
from membench.records import (
    NO_SPACE_EXIT,
    Cell,
    CorruptRecordError,
    ProbeBudget,
    Record,
    RecordStore,
    no_room_record,
    read_record,
    timestamp,
)
from membench.store_lock import held_fds

LOG_TAIL_CHARS = 1500


def _log_tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-LOG_TAIL_CHARS:].strip()
    except OSError:
        return ""


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
            record = with_life_peak(_outcome(cell, rc, out, log_path, timeout, proc.pid, t0), watch)
        record = _stamped(record, started, t0, options)
        return _with_timeline(record, sampler, t0, marks, timeline_path)
    finally:
        out.unlink(missing_ok=True)  # read above, or left by a worker whose runner was stopped
        if marks is not None:
            marks.unlink(missing_ok=True)


def with_life_peak(record: Record, watch: memory_cap.GroupWatch) -> Record:
    """The record with its whole-life peak: the worker's own VmHWM plus the highest its
    group's other processes held (where the worker wrote its own part)."""
    own = record.metrics.get(LIFE_OWN_METRIC)
    if own is not None:
        record.metrics[LIFE_OTHERS_METRIC] = float(watch.others_peak)
        record.metrics[LIFE_METRIC] = own + watch.others_peak
    return record


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
            with _sampling(procs[0].pid, timeline_path) as sampler:
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
            record = _outcome(cell, rc, outs[rank], log_path, timeout, proc.pid, t0)
        records.append(record)
    record = _stamped(distributed.merge_ranks(cell, records), started, t0, options)
    return _with_timeline(record, sampler, t0, marks, timeline_path)


def kernel_log() -> str:
    """The kernel's message buffer ('' where this user may not read it)."""
    try:
        return subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def oom_kill_line(log: str, pid: int, since: float = 0.0) -> str | None:
    """The kernel log's line saying its out-of-memory killer killed process pid at or after
    `since` (seconds of CLOCK_MONOTONIC, the clock of the log's timestamps), if any; the time
    bound keeps a reused pid from matching an older kill."""
    pattern = rf"^\[\s*(\d+\.\d+)\] (.*Killed process {pid}\b.*)$"
    for stamp, line in reversed(re.findall(pattern, log, re.MULTILINE)):
        if float(stamp) >= since:
            return line.strip()
    return None


def _outcome(
    cell: Cell,
    rc: int | None,
    out: Path,
    log_path: Path,
    timeout: float,
    pid: int = 0,
    started: float = 0.0,
    read_kernel_log: Callable[[], str] = kernel_log,
) -> Record:
    """The Record a finished, killed or timed-out worker leaves."""
    if rc is None:
        return Record(cell, "timeout", f"worker killed after {timeout:.0f} s without finishing")
    if out.exists():
        try:
            return read_record(out)
        except CorruptRecordError as exc:
            return Record(cell, "error", str(exc))
        finally:
            out.unlink(missing_ok=True)
    if rc == NO_SPACE_EXIT:  # the worker's own status: no room for its record file (ENOSPC)
        return no_room_record(cell, log_path)
    if rc == -signal.SIGKILL and (line := oom_kill_line(read_kernel_log(), pid, started)):
        return Record(cell, "oom", f"host memory ran out: the kernel's OOM killer ({line})")
    if rc < 0:
        why = f"worker killed by signal {signal.Signals(-rc).name}"
        if rc == -signal.SIGKILL:
            why += " (the kernel's out-of-memory killer sends this when host memory runs out)"
    else:
        why = f"worker exited with status {rc} without a record"
    tail = _log_tail(log_path)
    return Record(cell, "error", f"{why}; log tail: {tail}" if tail else why)


def _kill_group(proc: subprocess.Popen) -> None:
    distributed.kill_group(proc.pid)
    proc.wait()


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a scheduler, `timeout`, a closed terminal), handled as Ctrl-C."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"terminated by {signal.Signals(signum).name}")


# The signal that ended the run, whatever exception carried it up (a library may re-raise a
# plain KeyboardInterrupt): the command line's exit status says which it was.
received: list[int] = []


def _raise_terminated(signum: int, frame: object) -> None:
    received.append(signum)
    raise Terminated(signum)


def raise_if_terminated(since: int) -> None:
    """Raise Terminated for a signal received after the first `since`, whose exception code
    running at that moment swallowed: a finaliser's (Ray's ObjectRefGenerator.__del__, where
    Python only prints "Exception ignored"), so a loop that polls calls this between waits."""
    if len(received) > since:
        raise Terminated(received[-1])


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP end the run as Ctrl-C does: the running worker's
    process group is killed and the finished records stay (signals reach the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def cell_timeout(cell: Cell, timeout: float | None = None) -> float:
    """The seconds a cell's worker may run: the given limit, else the preset's."""
    return timeout or registry.preset(cell.preset).cell_timeout(cell.workload)


@dataclass
class RunResult:
    records: list[Record]
    measured: int  # cells run now
    reused: int  # cells kept from an earlier (interrupted) run
    deferred: list[Cell] = field(default_factory=list)  # not started: the deadline had passed


# Cells in flight and the node each runs on, reported as they start and end.
OnFlight = Callable[[Mapping[Cell, str]], None]
# Called when an engine resubmits a cell (its node was lost): the cell, and why.
OnRetry = Callable[[Cell, str], None]


@dataclass(frozen=True)
class RunControl:
    """How a run treats its cells and what it reports as they go (every engine's run takes
    one). on_flight and on_retry are for engines that measure several cells at once."""

    timeout: float | None = None  # seconds per cell (default: the preset's)
    fresh: bool = False  # measure stored cells again
    retry_failed: bool = True  # measure stored timeout/error cells again
    deadline: float | None = None  # no cell starts after this (time.monotonic())
    on_start: Callable[[Cell, int, int], None] | None = None  # cell, index, total
    on_done: Callable[[Record, bool], None] | None = None  # record, reused
    on_flight: OnFlight | None = None
    on_retry: OnRetry | None = None
    # framework -> the interpreter its workers run under (a release's environment, the
    # version sweep's); a framework not named runs under its own (membench.interpreters)
    interpreters: Mapping[str, str] = field(default_factory=dict)
    # the memory cap, timeline, trace and workers' environment of every cell's launch
    worker: WorkerOptions = DEFAULT_OPTIONS


DEFAULT_CONTROL = RunControl()  # every engine's default (a shared, frozen instance)


def resume_cap(control: RunControl, engine: str = "local") -> float | None:
    """The memory cap the resume rule compares a cap-ended `oom` with (reusable_record): the
    one this host gives a cell now for the local engine; for a cluster, whose nodes each
    compute their own default, only a cap the run gave (--memory-cap), else None (kept)."""
    return control.worker.cap() if engine == "local" else control.worker.memory_cap


def run(
    cells: Iterable[Cell], store: RecordStore, control: RunControl = DEFAULT_CONTROL
) -> RunResult:
    """Measure cells not already in the store (all of them with control.fresh).

    A stored ok/oom/unsupported record is reused; a stored timeout/error is re-run unless
    retry_failed is False. A corrupt stored record is re-measured, never half-read. A cell
    its backend's declarations refuse is recorded `unsupported` without a worker. No cell
    starts after the deadline; those are returned as deferred, for a rerun.
    """
    cells = list(cells)
    result = RunResult([], 0, 0)
    with terminate_as_interrupt():
        for i, cell in enumerate(cells):
            existing = reusable_record(
                cell, store, control.fresh, control.retry_failed, resume_cap(control)
            )
            if existing:
                result.records.append(existing)
                result.reused += 1
                if control.on_done:
                    control.on_done(existing, True)
                continue
            if control.deadline is not None and time.monotonic() > control.deadline:
                result.deferred.append(cell)
                continue
            store.check_space()  # StoreFullError: stop before measuring what cannot be kept
            if control.on_start:
                control.on_start(cell, i, len(cells))
            python = control.interpreters.get(cell.framework)
            record = measure_cell(cell, store, control.timeout, python, control.worker)
            store.put(record)  # RecordNotSavedError carries the record
            result.records.append(record)
            result.measured += 1
            if control.on_done:
                control.on_done(record, False)
    return result


def measure_cell(
    cell: Cell, store: RecordStore, timeout: float | None = None, python: str | None = None,
    options: WorkerOptions = DEFAULT_OPTIONS,
) -> Record:  # fmt: skip
    """The cell's record: refused from the declarations, or measured by a worker (under
    python where given), with its timeline and the framework's memory view where the options
    ask for them."""
    if reason := declared_refusal(cell):
        return refused_record(cell, reason, options.worker_env())
    path = store.timeline_path(cell) if options.timeline else None
    limit = cell_timeout(cell, timeout)
    record = run_worker(cell, store.log_path(cell), limit, path, python, options)
    if options.trace and record.status == "ok" and rank_processes(cell) == 1:
        record.environment["traces"] = run_trace(
            cell, store.root / TRACES, store.log_path(cell), limit, options
        )
    return record


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
