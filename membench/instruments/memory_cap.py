"""The memory cap per cell: host memory a cell's worker processes may hold resident.

On by default: DEFAULT_SHARE of the memory available when the run starts (set once by the
command line and passed down with the run's options, so every cell of a run has the same
cap; a run without it computes the default at each launch), `--memory-cap` to choose it. The
runner watches the resident memory of the worker's process group (every process the worker
started) while it waits, and ends the group once it is over the cap: the cell is `oom`, its
reason naming the cap. Workers also raise their oom_score_adj, so that if memory still runs
out (an allocation faster than the watch) the kernel picks a worker, not another program.

The cap bounds host memory only; device memory is the framework's own limit's (capacity).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DEFAULT_SHARE = 0.8
PAGE = os.sysconf("SC_PAGE_SIZE")
GIB = 2**30
_CAP_MARK = "over the memory cap"
# the variable an explicit --memory-cap reaches a worker by, which its record's env keeps
ENV = "MEMBENCH_MEMORY_CAP"
# the environment field of a record the cap ended: the cap in bytes, which a later run with a
# larger one measures again (membench.cells.planning.reusable_record)
CAP_FIELD = "memory_cap_bytes"


def available_bytes() -> int:
    """Memory the host can give now (MemAvailable)."""
    import psutil

    return int(psutil.virtual_memory().available)


def total_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def default_cap() -> float:
    return DEFAULT_SHARE * available_bytes()


def cap_bytes(given: float | None = None) -> float:
    """The cap in force: the run's (given), else the default computed now."""
    return given if given is not None else default_cap()


def _group(pgid: int, proc: Path) -> list[tuple[Path, int]]:
    """(/proc entry, resident bytes) of every process in process group pgid."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended while we looked
            continue
        # the fields after the command's closing parenthesis: state ppid pgrp ... rss (22nd)
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid:
            found.append((entry, int(fields[21]) * PAGE))
    return found


def _pss(entry: Path, rss: int) -> int:
    """The process's proportional share of its resident pages (its RSS where unreadable)."""
    try:
        for line in (entry / "smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return rss


def group_members(pgid: int, proc: Path = Path("/proc")) -> list[int]:
    """The PIDs of every process in process group pgid."""
    return [int(entry.name) for entry, _ in _group(pgid, proc)]


def group_rss(pgid: int, proc: Path = Path("/proc")) -> int:
    """Resident bytes of every process in process group pgid (0 where none is left)."""
    return sum(rss for _, rss in _group(pgid, proc))


def over_cap(pgid: int, cap: float, proc: Path = Path("/proc")) -> int | None:
    """The group's resident bytes if over the cap, else None. Forked processes share pages,
    which each one's RSS counts again: over the cap by RSS, several processes are counted by
    their proportional share (PSS) before the group is judged (RSS alone is cheap to read;
    PSS walks the page tables, so only then)."""
    return _judged(_group(pgid, proc), cap)


class GroupWatch:
    """The worker's process group looked at while the runner waits: over the cap or not, and
    the highest summed memory of its other processes (forked compilers, compile workers),
    which the whole-life peak adds to the worker's own VmHWM. Others are counted by their
    proportional share, since a fork's RSS counts the pages it shares again."""

    def __init__(self, pgid: int = 0, proc: Path = Path("/proc")) -> None:  # pgid: set at start
        self.pgid, self.proc = pgid, proc
        self.others_peak = 0

    def over(self, cap: float) -> int | None:
        """The group's resident bytes if over the cap, else None (over_cap's rule)."""
        group = _group(self.pgid, self.proc)
        others = [(entry, rss) for entry, rss in group if entry.name != str(self.pgid)]
        shares: dict[Path, int] = {}
        # a share is at most the RSS: the others' shares can raise their peak only where their
        # RSS does, and PSS walks the page tables (harness CPU while a compiler runs)
        if others and sum(rss for _, rss in others) > self.others_peak:
            shares = {entry: _pss(entry, rss) for entry, rss in others}
            self.others_peak = max(self.others_peak, sum(shares.values()))
        return _judged(group, cap, shares)


def _judged(
    group: list[tuple[Path, int]], cap: float, shares: Mapping[Path, int] | None = None
) -> int | None:
    """The group's resident bytes if over the cap (by PSS where RSS is, several processes
    sharing pages; shares already read are not read again), else None."""
    resident = sum(rss for _, rss in group)
    if resident > cap and len(group) > 1:
        known = shares or {}
        resident = sum(known[e] if e in known else _pss(e, rss) for e, rss in group)
    return resident if resident > cap else None


def over_cap_reason(resident: float, cap: float) -> str:
    return (
        f"the worker's processes held {resident / GIB:.2f} GiB resident, {_CAP_MARK} of "
        f"{cap / GIB:.2f} GiB (--memory-cap; default {DEFAULT_SHARE:.0%} of the memory "
        "available at the run's start): ended by the runner"
    )


def is_cap_reason(text: str) -> bool:
    return _CAP_MARK in text


# How much larger a run's cap must be than the one that ended a cell for the cell to be measured
# again: the default cap follows the memory available at each launch, which moves a little
# from run to run, and a cell it ended would otherwise be run into it again on every resume.
RAISED = 1.25


def raised(cap: float | None, ended: float | None) -> bool:
    """Whether a cap (None: unknown) is clearly above the one that ended a cell (None: the
    cell was not ended by a cap, or its record does not say which)."""
    return cap is not None and ended is not None and cap > RAISED * ended


def ended_under(record_reason: str, environment: Mapping[str, object]) -> float | None:
    """The cap that ended a cell (bytes), where its record says so: the field its runner
    wrote, or an explicit --memory-cap in its workers' environment (records written before the
    field); None for any other record."""
    if not is_cap_reason(record_reason):
        return None
    cap = environment.get(CAP_FIELD)
    if cap is None:
        cap = (environment.get("env") or {}).get(ENV)
    try:
        return float(cap) if cap is not None else None
    except (TypeError, ValueError):
        return None
