"""The parts of a step reported apart from compute, and the step-level helpers the memory
hygiene, host-data and variable-length strategies share across backends.

A Session times its host-to-device copy and its collector run with a PhaseClock; the worker
reads them after each measured step through Session.step_phases(). Framework-free.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

TRANSFER = "transfer"  # the batch copied from host memory to the device, synchronized
COLLECTOR = "collector"  # the collector and the cache release (hygiene strategies)
PHASES = (TRANSFER, COLLECTOR)


class PhaseClock:
    """Seconds per phase of the current step."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}

    def start_step(self) -> None:
        self.last = {}

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        if phase not in PHASES:
            raise ValueError(f"unknown step phase {phase!r}; phases: {', '.join(PHASES)}")
        start = time.perf_counter()
        try:
            yield
        finally:
            self.last[phase] = self.last.get(phase, 0.0) + time.perf_counter() - start


def hygiene_due(step: int, every: int) -> bool:
    """Whether the collector runs after step number `step` (1-based): every k-th step."""
    return every > 0 and step % every == 0


# -- two models -------------------------------------------------------------------------------
# Jittor 1.3.11 draws the same normal numbers under set_global_seed(0) and (1) (measured): the
# second model's seed is a distant one, in every framework alike.
SECOND_MODEL_SEED_OFFSET = 101


def model_seeds(seed: int) -> tuple[int, int]:
    """The seeds of the two independently initialised models."""
    return seed, seed + SECOND_MODEL_SEED_OFFSET


# -- variable-length inputs -------------------------------------------------------------------
LENGTH_LEVELS = 8  # distinct lengths: 1/8, 2/8, ... of the preset's sequence length
SCHEDULE_STEPS = 64  # the schedule repeats after this many steps


def distinct_lengths(seq_len: int) -> tuple[int, ...]:
    """The lengths the schedule draws from, shortest first."""
    return tuple(sorted({max(1, seq_len * i // LENGTH_LEVELS) for i in range(1, 9)}))


def length_schedule(seq_len: int, seed: int = 0) -> tuple[int, ...]:
    """A fixed, seeded sequence of lengths, one per step (the same in every framework)."""
    rng = np.random.default_rng(seed)
    return tuple(int(n) for n in rng.choice(distinct_lengths(seq_len), size=SCHEDULE_STEPS))


def lengths_for_step(step: int, seq_len: int, seed: int = 0) -> tuple[int, ...]:
    """The lengths step number `step` (0-based) runs: the first step runs every distinct
    length once, so that each shape's compilation lands in the first step, as it does with
    fixed shapes; every later step runs the schedule's next length."""
    if step == 0:
        return distinct_lengths(seq_len)
    schedule = length_schedule(seq_len, seed)
    return (schedule[(step - 1) % len(schedule)],)
