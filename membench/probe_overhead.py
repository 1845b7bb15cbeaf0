"""What the suite's sampler thread costs a step, measured in a fresh process per framework.

    python -m membench.probe_overhead --cell '{"workload": ...}'

The worker samples NVML every SAMPLE_INTERVAL_SECONDS (membench.probes) in a thread during
the measured steps on GPUs (none runs on a CPU host: there the host peak is the kernel's VmHWM,
read once). This module builds the cell's session as the worker does, warms it up, then times
rounds of steps alternately without and with a PeakSampler at the worker's interval (or
--interval's), reading NVML on GPUs, the process's VmRSS elsewhere as a stand-in of the same
kind (a read per interval), and prints both medians as one JSON line. Target: below 1% of a step.

Beside the medians: the range of the per-round overheads (a round's with-median over its
without-median), which says whether a figure is the sampler or the step's own spread, and the
sampler's coverage (readings taken over the readings its interval asks for): a framework that
holds Python's GIL while it executes a step starves the thread, whose readings then come
between steps only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from membench import registry
from membench.argtypes import positive_int, positive_seconds
from membench.backends import BuildSpec, Session
from membench.environment import detected_device
from membench.probes import SAMPLE_INTERVAL_SECONDS, NvmlReader, PeakSampler, current_rss_bytes
from membench.records import Cell
from membench.worker import apply_env, warm_up


def _timed(session: Session, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        session.step()
        times.append(time.perf_counter() - start)
    return times


ROUNDS = 8


def measure(
    cell: Cell, rounds: int = ROUNDS, steps: int = 3, interval: float = SAMPLE_INTERVAL_SECONDS
) -> dict[str, object]:
    """Median step time without and with the sampler thread, over interleaved rounds."""
    backend = registry.load_backend(cell.framework)
    spec = BuildSpec.of(cell)
    apply_env(backend, spec.strategy)
    on_gpu = detected_device() == "cuda"
    reader = NvmlReader() if on_gpu else current_rss_bytes  # NVML's before the framework's
    session = backend.build(spec)
    warm_up(session, registry.preset(cell.preset))
    without: list[float] = []
    with_sampler: list[float] = []
    per_round: list[float] = []
    samples = 0
    for _ in range(rounds):  # alternating, so that drift in the host's load hits both alike
        plain = _timed(session, steps)
        with PeakSampler(reader, interval) as sampler:
            sampled = _timed(session, steps)
        samples += sampler.samples
        without += plain
        with_sampler += sampled
        per_round.append(statistics.median(sampled) / statistics.median(plain) - 1)
    a, b = statistics.median(without), statistics.median(with_sampler)
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
