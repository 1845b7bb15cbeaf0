"""A cell's memory timeline, sampled from outside the worker.

The runner reads the resident memory of the worker and of the rest of its process group (other
ranks, forked helpers, compilers: apart, since a fork's RSS counts pages it shares with the
worker again) every INTERVAL_SECONDS from /proc, in a thread of its own process, so no framework
can starve the sampler (a thread inside the worker stops while Jittor holds the interpreter
lock through a step). On GPUs it also reads NVML's per-process use of the device (no more
often than DEVICE_INTERVAL_SECONDS: an NVML call costs far more than a /proc read). The worker
marks its phases (membench.instruments.marks); the samples, the marks and a summary go to one
Parquet file beside the record (the store's timelines/ folder), which the record names.

Honest against the peak: over the measured steps, the timeline's maximum is compared with the
worker's VmHWM (the record's peak_host_rss_bytes); the difference is recorded, with the
largest change between two samples in that window (the sampling's resolution there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from membench.instruments import marks as phase_marks
from membench.instruments.memory_cap import PAGE, group_members
from membench.metrics import (
    TIMELINE_MEASURED_PEAK_HOST_RSS_BYTES,
    TIMELINE_OTHERS_PEAK_RSS_BYTES,
    TIMELINE_PEAK_GAP_BYTES,
    TIMELINE_PEAK_HOST_RSS_BYTES,
    TIMELINE_SAMPLER_CPU_SHARE,
    TIMELINE_SAMPLING_BOUND_BYTES,
)

# the interval; what it costs is measured by membench selfcheck (hence --timeline)
INTERVAL_SECONDS = 0.005
DEVICE_INTERVAL_SECONDS = 0.02
RESCAN_SECONDS = 1.0  # how often the group's members are looked up again (a /proc walk)
FORMAT = "membench-timeline/1"
META_KEY = b"membench"  # the Parquet metadata key of the marks and the summary
# Sampled where a run asks (`--timeline`: the runner's WorkerOptions.timeline). Off by default:
# on the 2-core host the sampler took 1-4% of one core in the committed timelines (a wake-up
# every 5 ms costs a VM tens of microseconds of kernel time, whatever the language), which a
# step can feel.


class _Statm:
    """Resident bytes of one process by re-reading its /proc statm (pread of an open file:
    about a microsecond)."""

    def __init__(self, pid: int, proc: Path) -> None:
        self.fd = os.open(proc / str(pid) / "statm", os.O_RDONLY)

    def read(self) -> int | None:
        try:
            return int(os.pread(self.fd, 128, 0).split()[1]) * PAGE
        except (OSError, IndexError, ValueError):  # ended
            return None

    def close(self) -> None:
        os.close(self.fd)


@dataclass
class Samples:
    t: list[float] = field(default_factory=list)  # CLOCK_MONOTONIC seconds
    rss: list[int] = field(default_factory=list)  # the worker's resident bytes
    # the rest of its process group (other ranks, forked helpers, compilers): each one's RSS,
    # so pages a fork shares with the worker count again
    others: list[int] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)  # the group's processes
    device: list[int | None] = field(default_factory=list)  # NVML process bytes (GPU)
    cpu_seconds: float = 0.0  # the sampler thread's own CPU time
    wall_seconds: float = 0.0
    interval: float = INTERVAL_SECONDS


class GroupSampler:
    """Samples the resident memory of a worker (the leader of process group pgid) and of the
    rest of its group, in a thread, until stopped."""

    def __init__(
        self,
        pgid: int,
        interval: float = INTERVAL_SECONDS,
        device: Callable[[], int | None] | None = None,
        proc: Path = Path("/proc"),
    ) -> None:
        self.pgid, self.interval, self.proc = pgid, interval, proc
        self._device = device
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._files: dict[int, _Statm] = {}
        self.samples = Samples(interval=interval)

    def _rescan(self) -> None:
        # the leader itself, even where it leads no group (a process watched by PID)
        members = {self.pgid, *group_members(self.pgid, self.proc)}
        for pid in set(self._files) - members:
            self._files.pop(pid).close()
        for pid in members - set(self._files):
            try:
                self._files[pid] = _Statm(pid, self.proc)
            except OSError:  # ended meanwhile
                pass

    def _resident(self) -> tuple[int, int]:
        """(the worker's resident bytes, the rest of its group's)."""
        own = others = 0
        for pid, statm in list(self._files.items()):
            value = statm.read()
            if value is None:
                self._files.pop(pid).close()
            elif pid == self.pgid:
                own = value
            else:
                others += value
        return own, others

    def _loop(self) -> None:
        # time.sleep, not Event.wait: half the CPU per tick on a VM (stop waits one tick)
        s = self.samples
        cpu0, wall0 = time.thread_time(), time.monotonic()
        next_scan = next_device = wall0
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_scan:
                self._rescan()
                next_scan = now + RESCAN_SECONDS
            device = None
            if self._device is not None and now >= next_device:
                try:
                    device = self._device()
                except Exception:  # a failed reading is a gap, never the cell's end
                    device = None
                next_device = now + DEVICE_INTERVAL_SECONDS
            own, others = self._resident()
            s.t.append(now)
            s.rss.append(own)
            s.others.append(others)
            s.processes.append(len(self._files))
            s.device.append(device)
            time.sleep(max(0.0, now + self.interval - time.monotonic()))
        s.cpu_seconds = time.thread_time() - cpu0
        s.wall_seconds = time.monotonic() - wall0

    def start(self) -> GroupSampler:
        self._thread = threading.Thread(target=self._loop, name="timeline", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Samples:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for statm in self._files.values():
            statm.close()
        self._files.clear()
        return self.samples


# -- the summary: phases, the peak, and the peak against VmHWM ---------------------------------
def phase_at(t: float, marks: Sequence[tuple[float, str]], names: Sequence[str]) -> str:
    """The phase (among names) that time t falls in: the last such mark at or before t."""
    current = ""
    for stamp, name in marks:
        if stamp > t:
            break
        if name in names:
            current = name
    return current


def _window(marks: Sequence[tuple[float, str]]) -> tuple[float, float] | None:
    """The measured steps' span: from their mark to the next cell phase's."""
    start = next((t for t, n in marks if n == phase_marks.MEASURED), None)
    if start is None:
        return None
    end = next((t for t, n in marks if t > start and n == phase_marks.AFTER), None)
    return (start, end) if end is not None else None


def summarise(
    samples: Samples, marks: Sequence[tuple[float, str]], vmhwm: float | None
) -> dict[str, Any]:
    """What the record keeps of a timeline: the worker's whole-cell peak and the phase it fell
    in, its peak over the measured steps and that peak's gap to VmHWM, the rest of the
    group's peak, the sampler's cost. The largest change between two samples in the window
    (sampling_bound_bytes) is the sampling's resolution there, not a bound on what it missed:
    a spike that rises and falls between two samples leaves no change behind."""
    t, rss = samples.t, samples.rss
    out: dict[str, Any] = {"samples": len(t)}
    if samples.wall_seconds:
        out["sampler_cpu_share"] = samples.cpu_seconds / samples.wall_seconds
    if not t:
        return out
    top = max(range(len(t)), key=rss.__getitem__)
    out["peak_bytes"] = rss[top]
    out["others_peak_bytes"] = max(samples.others, default=0)
    out["peak_phase"] = phase_at(t[top], marks, phase_marks.CELL_PHASES)
    inner = phase_at(t[top], marks, (phase_marks.STEP, *phase_marks.STEP_PHASES))
    if out["peak_phase"] in (phase_marks.FIRST_STEP, phase_marks.WARM_UP, phase_marks.MEASURED):
        out["peak_step_phase"] = inner if inner in phase_marks.STEP_PHASES else ""
    window = _window(marks)
    if window is None:
        return out
    inside = [i for i, stamp in enumerate(t) if window[0] <= stamp <= window[1]]
    if not inside:
        return out
    out["measured_peak_bytes"] = max(rss[i] for i in inside)
    jumps = [abs(rss[i] - rss[i - 1]) for i in inside[1:]]
    out["sampling_bound_bytes"] = max(jumps, default=0)
    intervals = [t[i] - t[i - 1] for i in inside[1:]]
    if intervals:
        out["largest_interval_seconds"] = max(intervals)
    if vmhwm:
        out["peak_gap_bytes"] = vmhwm - out["measured_peak_bytes"]
    return out


# the record's metrics (membench.metrics) from the summary's keys
METRICS = {
    "peak_bytes": TIMELINE_PEAK_HOST_RSS_BYTES,
    "measured_peak_bytes": TIMELINE_MEASURED_PEAK_HOST_RSS_BYTES,
    "peak_gap_bytes": TIMELINE_PEAK_GAP_BYTES,
    "others_peak_bytes": TIMELINE_OTHERS_PEAK_RSS_BYTES,
    "sampling_bound_bytes": TIMELINE_SAMPLING_BOUND_BYTES,
    "sampler_cpu_share": TIMELINE_SAMPLER_CPU_SHARE,
}


def write(
    path: Path, samples: Samples, marks: Sequence[tuple[float, str]], summary: dict[str, Any],
    step_phases: str = "", origin: float | None = None,
) -> None:  # fmt: skip
    """The timeline as Parquet: columns t (seconds since origin, the worker's launch; else the
    first sample), rss_bytes, others_rss_bytes, processes, device_bytes (GPU only); the marks
    (same clock), the summary and the phase names in the file's metadata. Written under a
    temporary name and renamed: a reader never sees half a file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = origin if origin is not None else (samples.t[0] if samples.t else 0.0)
    columns = {
        "t": pa.array([x - t0 for x in samples.t], pa.float64()),
        "rss_bytes": pa.array(samples.rss, pa.int64()),
        "others_rss_bytes": pa.array(samples.others, pa.int64()),
        "processes": pa.array(samples.processes, pa.int16()),
    }
    if any(v is not None for v in samples.device):
        columns["device_bytes"] = pa.array(samples.device, pa.int64())
    meta = {
        "format": FORMAT,
        "interval_seconds": samples.interval,
        "cell_phases": list(phase_marks.CELL_PHASES),
        "step_phases": list(phase_marks.STEP_PHASES),
        "marks": [[round(stamp - t0, 6), name] for stamp, name in marks],
        "step_phases_marked": step_phases,
        "summary": summary,
    }
    table = pa.table(columns).replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read(path: Path) -> tuple[Any, dict[str, Any]]:
    """(the samples as a pyarrow Table, the metadata) of a timeline file."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return table, json.loads(table.schema.metadata[META_KEY])


# -- a sampler of its own, for `membench selfcheck`'s cost measurement -------------------------
def main(argv: list[str] | None = None) -> int:
    """Sample process group --pid (as the runner does) until stdin closes; print "ready" once
    sampling, then the samples' count and the sampler's CPU as one JSON line."""
    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("--pid", type=int, required=True, help="the process group's leader")
    parser.add_argument("--interval", type=float, default=INTERVAL_SECONDS)
    args = parser.parse_args(argv)
    sampler = GroupSampler(args.pid, args.interval).start()
    print("ready", flush=True)
    sys.stdin.read()
    s = sampler.stop()
    share = s.cpu_seconds / s.wall_seconds if s.wall_seconds else None
    print(json.dumps({"samples": len(s.t), "sampler_cpu_share": share}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
