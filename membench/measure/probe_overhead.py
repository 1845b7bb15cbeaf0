"""What the suite's sampler thread costs a step, measured in a fresh process per framework.

    python -m membench.measure.probe_overhead --cell '{"workload": ...}'

The worker samples NVML every SAMPLE_INTERVAL_SECONDS (membench.instruments.probes) in a thread
during the measured steps on GPUs (none runs on a CPU host: there the host peak is the kernel's
VmHWM, read once). This module builds the cell's session as the worker does, warms it up, then times
rounds of steps alternately without and with a PeakSampler at the worker's interval (or
--interval's), reading NVML on GPUs, the process's VmRSS elsewhere as a stand-in of the same
kind (a read per interval), and prints both medians as one JSON line. Target: below 1% of a step.

Then the same for the runner's timeline sampler (membench.instruments.timeline): a process of its
own reading this one's memory from /proc every timeline.INTERVAL_SECONDS, started before a round
and stopped after it, rounds interleaved with the plain ones alike.

Beside the medians: the range of the per-round overheads (a round's with-median over its
without-median), which says whether a figure is the sampler or the step's own spread, and the
sampler's coverage (readings taken over the readings its interval asks for): a framework that
holds Python's GIL while it executes a step starves the thread, whose readings then come
between steps only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from membench import registry
from membench.argtypes import positive_int, positive_seconds
from membench.backends import BuildSpec, Session, set_up_process
from membench.environment import detected_device
from membench.instruments import timeline
from membench.instruments.probes import (
    SAMPLE_INTERVAL_SECONDS,
    NvmlReader,
    PeakSampler,
    current_rss_bytes,
)
from membench.measure.worker import warm_up
from membench.metrics import TIMELINE_SAMPLER_CPU_SHARE
from membench.records import Cell


def _timed(session: Session, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        session.step()
        times.append(time.perf_counter() - start)
    return times


ROUNDS = 8


@contextmanager
def outside_sampler() -> Iterator[dict]:
    """The timeline's sampler, in a process of its own, watching this process over the block;
    yields what it reported once the block is done (samples, its CPU share)."""
    report: dict = {}
    # this process leads no group of its own: the sampler watches it by PID (pgid = its PID)
    proc = subprocess.Popen(
        [sys.executable, "-m", "membench.instruments.timeline", "--pid", str(os.getpid())],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        proc.stdout.readline()  # "ready": sampling
        yield report
    finally:
        out, _ = proc.communicate("", timeout=30)
        if out.strip():
            report.update(json.loads(out.strip().splitlines()[-1]))


def measure(
    cell: Cell, rounds: int = ROUNDS, steps: int = 3, interval: float = SAMPLE_INTERVAL_SECONDS
) -> dict[str, object]:
    """Median step time without and with the sampler thread, over interleaved rounds."""
    backend = registry.load_backend(cell.framework)
    spec = BuildSpec.of(cell)
    set_up_process(backend, spec.strategy)
    on_gpu = detected_device() == "cuda"
    reader = NvmlReader() if on_gpu else current_rss_bytes  # NVML's before the framework's
    session = backend.build(spec)
    warm_up(session, registry.preset(cell.preset))
    without: list[float] = []
    with_sampler: list[float] = []
    per_round: list[float] = []
    samples = 0
    outside: list[float] = []
    outside_rounds: list[float] = []
    outside_cpu: list[float] = []
    for _ in range(rounds):  # alternating, so that drift in the host's load hits all alike
        plain = _timed(session, steps)
        with PeakSampler(reader, interval) as sampler:
            sampled = _timed(session, steps)
        with outside_sampler() as report:
            watched = _timed(session, steps)
        samples += sampler.samples
        without += plain
        with_sampler += sampled
        outside += watched
        per_round.append(statistics.median(sampled) / statistics.median(plain) - 1)
        outside_rounds.append(statistics.median(watched) / statistics.median(plain) - 1)
        if report.get("sampler_cpu_share") is not None:
            outside_cpu.append(report["sampler_cpu_share"])
    a, b = statistics.median(without), statistics.median(with_sampler)
    c = statistics.median(outside)
    # The sampler reads once as it starts and once as it stops (the caller's thread); its own
    # thread reads as it starts and then once a tick: those are the readings coverage counts.
    thread_readings = samples - 2 * rounds
    asked = rounds + sum(with_sampler) / interval
    return {
        "reader": "nvml" if on_gpu else "VmRSS (stand-in: no sampler runs on a CPU host)",
        "step_seconds_without": a,
        "step_seconds_with": b,
        "overhead": b / a - 1,
        "overhead_rounds_min": min(per_round),
        "overhead_rounds_max": max(per_round),
        "rounds": rounds,
        "samples": samples,
        "sampler_coverage": thread_readings / asked,
        "interval_seconds": interval,
        # the runner's timeline sampler (a process of its own)
        "timeline_step_seconds_with": c,
        "timeline_overhead": c / a - 1,
        "timeline_overhead_rounds_min": min(outside_rounds),
        "timeline_overhead_rounds_max": max(outside_rounds),
        TIMELINE_SAMPLER_CPU_SHARE: statistics.median(outside_cpu) if outside_cpu else None,
        "timeline_interval_seconds": timeline.INTERVAL_SECONDS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", required=True, help="the Cell as JSON")
    parser.add_argument(
        "--interval", type=positive_seconds, default=SAMPLE_INTERVAL_SECONDS,
        help=f"sampling period in seconds (default: the worker's, {SAMPLE_INTERVAL_SECONDS})",
    )  # fmt: skip
    parser.add_argument(
        "--rounds", type=positive_int, default=ROUNDS,
        help=f"alternating rounds (default {ROUNDS})",
    )  # fmt: skip
    args = parser.parse_args(argv)
    cell = Cell.from_dict(json.loads(args.cell))
    print(json.dumps(measure(cell, args.rounds, interval=args.interval)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
