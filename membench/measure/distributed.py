"""Cells of W ranks: the rank environment, the launch of W workers, and one Record from W.

A multi-rank cell is W worker processes started together in one process group (torch.distributed
reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment, as torchrun sets
them), under the cell's one timeout: past it, or once a rank has ended and the others have not
followed within a grace period (a rank that died leaves its peers waiting in a collective), the
whole group is killed. Each rank measures itself; the cell's Record keeps every rank's metrics
and, for each memory metric, the max and the sum over ranks under names that say so: a sum of
per-rank peaks is never reported as a peak.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from membench.instruments import memory_cap
from membench.metrics import (
    RANK_AGGREGATES,
    STEP_SECONDS_MEDIAN,
    THROUGHPUT,
    over_ranks,
    rank_aggregated,
)
from membench.records import Cell, Record

MASTER_ADDR = "127.0.0.1"
# Seconds the other ranks get to finish once one has ended (a failed rank's peers never do).
PEER_GRACE_SECONDS = 30.0
POLL_SECONDS = 0.2


def free_port() -> int:
    """A TCP port free now on this host, for the ranks' rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((MASTER_ADDR, 0))
        return int(s.getsockname()[1])


def rank_env(
    rank: int, world_size: int, port: int, environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """The environment torchrun gives a rank on one node; the host's cores shared out among
    the ranks (torchrun sets OMP_NUM_THREADS=1 for several ranks a node: with W ranks on W
    cores the same), unless the caller set it."""
    threads = environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // world_size))
    return {
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": MASTER_ADDR, "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": threads,
    }  # fmt: skip


def rank_out(out: Path, rank: int) -> Path:
    return out.with_name(out.name.replace(".record.json", f".rank{rank}.record.json"))


def launch_ranks(
    cmd: Callable[[int], list[str]], env: Mapping[str, str], world_size: int, log: object,
    pass_fds: Sequence[int] = (),
) -> list[subprocess.Popen]:  # fmt: skip
    """W workers in one new process group (rank 0 leads it), all writing to one log; each
    inherits pass_fds (the store's lock)."""
    port = free_port()
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(world_size):
            group = procs[0].pid if procs else 0
            procs.append(
                subprocess.Popen(
                    cmd(rank),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**env, **rank_env(rank, world_size, port)},
                    process_group=group,
                    pass_fds=tuple(pass_fds),
                )  # fmt: skip
            )
    except BaseException:
        kill_ranks(procs)
        raise
    return procs


def wait_ranks(
    procs: Sequence[subprocess.Popen], timeout: float, grace: float = PEER_GRACE_SECONDS,
    cap: float | None = None,
) -> tuple[list[int | None], str]:  # fmt: skip
    """Exit statuses (None: killed by us) and why any rank was killed ('' if none was): the
    timeout, a peer's end, or the ranks' resident memory over the cap (memory_cap's reason)."""
    deadline = time.monotonic() + timeout
    first_exit: float | None = None
    while True:
        rcs = [p.poll() for p in procs]
        if all(rc is not None for rc in rcs):
            return rcs, ""
        now = time.monotonic()
        if first_exit is None and any(rc is not None for rc in rcs):
            first_exit = now
        why = ""
        if now > deadline:
            why = "timeout"
        elif first_exit is not None and now - first_exit > grace:
            why = f"stopped {grace:.0f} s after another rank ended"
        elif cap is not None and (resident := memory_cap.over_cap(procs[0].pid, cap)):
            why = memory_cap.over_cap_reason(resident, cap)
        if why:
            kill_ranks(procs)
            return rcs, why
        time.sleep(POLL_SECONDS)


def kill_group(pid: int) -> None:
    """SIGKILL the process group a worker leads (it and every process it started)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill_ranks(procs: Sequence[subprocess.Popen]) -> None:
    """SIGKILL the ranks' process group, and reap every rank."""
    if not procs:
        return
    kill_group(procs[0].pid)
    for p in procs:
        p.wait()


def merge_ranks(cell: Cell, records: Sequence[Record]) -> Record:
    """One Record from each rank's: ok only if every rank is; otherwise the first rank that
    ended on its own without success names the status and reason."""
    failed = [(r, rec) for r, rec in enumerate(records) if rec.status != "ok"]
    first = records[0]
    if failed:
        own = [(r, rec) for r, rec in failed if not rec.environment.get("stopped_by_runner")]
        r, rec = (own or failed)[0]
        merged = Record(cell, rec.status, f"rank {r} of {cell.world_size}: {rec.reason}")
        merged.environment = dict(rec.environment)
        merged.ranks = [dict(x.metrics) for x in records]
        return merged
    merged = Record(cell, "ok", environment=dict(first.environment))
    merged.ranks = [dict(x.metrics) for x in records]
    merged.metrics = summarise_ranks(merged.ranks, cell.batch_size)
    # the step ends when the slowest rank's does
    merged.step_times = [max(ts) for ts in zip(*(x.step_times for x in records), strict=False)]
    merged.environment["ranks_notes"] = [x.environment.get("strategy_notes", {}) for x in records]
    merged.started_at = first.started_at
    merged.wall_seconds = max(x.wall_seconds for x in records)
    return merged


def summarise_ranks(ranks: Sequence[Mapping[str, float]], global_batch: int) -> dict[str, float]:
    """The cell's metrics from its ranks': a memory metric's max and sum over ranks (named
    as such), any other metric's max (the slowest rank: collectives make the others wait);
    throughput is the global batch over the slowest median step."""
    out: dict[str, float] = {}
    for name in sorted({k for r in ranks for k in r}):
        values = [r[name] for r in ranks if name in r]
        if rank_aggregated(name):
            for how, fn in RANK_AGGREGATES.items():
                out[over_ranks(name, how)] = float(fn(values))
        else:
            out[name] = float(max(values))
    if STEP_SECONDS_MEDIAN in out:
        out[THROUGHPUT] = global_batch / out[STEP_SECONDS_MEDIAN]
    return out
