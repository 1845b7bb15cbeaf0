"""How a worker's ending becomes its cell's Record: the record it wrote, or why it wrote none
(killed at its timeout, by the kernel's out-of-memory killer or a signal, out of disk, or
exited without one, with the tail of its log), and its whole-life peak."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from membench.instruments import memory_cap
from membench.metrics import LIFE_METRIC, LIFE_OTHERS_METRIC, LIFE_OWN_METRIC
from membench.records import (
    NO_SPACE_EXIT,
    Cell,
    CorruptRecordError,
    Record,
    no_room_record,
    read_record,
)

LOG_TAIL_CHARS = 1500


def _log_tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-LOG_TAIL_CHARS:].strip()
    except OSError:
        return ""


def with_life_peak(record: Record, watch: memory_cap.GroupWatch) -> Record:
    """The record with its whole-life peak: the worker's own VmHWM plus the highest its
    group's other processes held (where the worker wrote its own part)."""
    own = record.metrics.get(LIFE_OWN_METRIC)
    if own is not None:
        record.metrics[LIFE_OTHERS_METRIC] = float(watch.others_peak)
        record.metrics[LIFE_METRIC] = own + watch.others_peak
    return record


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


def outcome(
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
