"""A capacity search's first guess from the framework's own compiler: the largest batch whose
whole-life peak host RSS is predicted to stay within a budget, from the step compiled (not run)
at a few batches in processes of their own. Framework-free: a framework offers it through its
backend's compiled_memory_module (JAX: membench.backends.jax_backend.compiled_memory).

The predicted whole-life peak at a batch B is

    peak(B) = max(held through build, held through compile,
                  held after compile + XLA's run buffers(B) + the runtime's base)

- "held ..." are the compile-only process's own RSS and VmHWM at B: the interpreter, jaxlib,
  the model state, the batch and what the compiler left behind, counted as a probe's worker
  counts them (the same build and compile, the same trim before the compile);
- XLA's run buffers are what compiled.memory_analysis() says the run adds to what is already
  resident: temporaries, the outputs that reuse no donated argument, generated code (on a CPU
  the arguments are host memory, already in the RSS);
- the runtime's base is the rest: what a first execution adds beyond XLA's buffers (thread
  pools, kernels' scratch; a line in the batch from one step run at each of the two smallest
  compiled batches) and what is resident but not XLA's (interpreter, jaxlib, the compiler's
  leftovers in the heap: the largest seen over the compiled batches, as those leftovers vary
  by ~100 MiB between processes). Measured once per search, in its own compile-only
  processes, never from a probe. The two stepped batches are the guess's own measurements
  (CompiledPrediction.measured_batches): its error is not scored at an answer there.

XLA's bytes are near-linear in the batch, so two compiled batches give a line; the largest
batch under the budget on it is then compiled once more (no step run) and the line redrawn
through it and the compiled batch nearest it (the confirmation). Every compile runs under a
timeout in its own process, with the framework's interpreter (membench.interpreters); a
failure raises CompiledGuessFailed with the reason, for the caller to fall back on the
memory model.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from membench.environment import REPO_ROOT
from membench.interpreters import framework_python

# Seconds one compile-only process may take (build and compile; cpu-quick's cell limit).
COMPILE_TIMEOUT = 300.0
# The first compiled batch, in samples (rounded up to the step): small batches are quick to
# compile, but XLA lays out batch 1 unlike larger ones; the second is SPREAD times it.
FIRST_BATCH = 4
SPREAD = 4


class CompiledGuessFailed(RuntimeError):
    """A compile-only process failed or timed out; the message says why."""


@dataclass(frozen=True)
class CompiledPoint:
    """One compile-only process's figures at a batch, in bytes."""

    batch: int
    xla_bytes: float  # XLA's buffers: arguments + outputs not aliased + temp + code + inputs
    run_buffers: float  # what the run adds to what is resident: temp + outputs not aliased + code
    held_after_compile: float  # RSS after the compile: everything resident before the run
    held_through_compile: float = 0.0  # VmHWM through the compile (after the trim)
    held_through_build: float = 0.0  # VmHWM through import and build
    checked_first_step: float | None = None  # one step's measured peak (--run-step), or None

    def observed(self, first_run: float) -> float:
        """This process's whole-life peak, had it run its first step: the compile's mark, or
        what it held after the compile plus the run's buffers and the first run's extra."""
        if self.checked_first_step is not None:
            return max(self.held_through_compile, self.checked_first_step)
        return max(
            self.held_through_compile, self.held_after_compile + self.run_buffers + first_run
        )

    def base(self, first_run: float) -> float:
        """The runtime's base seen here: the peak less XLA's buffers (interpreter, jaxlib, the
        compiler's leftovers in the heap, the first run's extra)."""
        return self.observed(first_run) - self.xla_bytes

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> CompiledPoint:
        """From the JSON line a compiled_memory module prints."""
        xla = report["xla"]
        run = xla["temp"] + xla["output"] - xla["alias"] + xla["generated_code"]
        checked = report.get("checked_first_step_peak_bytes")
        return cls(
            batch=int(report["cell"]["batch_size"]),
            xla_bytes=float(xla["argument"] + run + report.get("resident_input_bytes", 0)),
            run_buffers=float(run),
            held_after_compile=float(report["host_rss_after_compile_bytes"]),
            held_through_compile=float(report["host_hwm_through_compile_bytes"]),
            held_through_build=float(report["host_hwm_through_build_bytes"]),
            checked_first_step=float(checked) if checked is not None else None,
        )


@dataclass(frozen=True)
class CompiledPrediction:
    """The compiler's largest batch within a budget, with the line it was read from."""

    batch: int  # the largest multiple of step predicted to fit; 0: not even one step
    bytes_per_sample: float
    fixed_bytes: float  # the line's intercept: peak(B) ~ fixed_bytes + bytes_per_sample * B
    basis: str
    points: list[tuple[int, float]] = field(default_factory=list)  # (batch, predicted peak)
    runtime_base_bytes: float = 0.0
    measured_batches: tuple[int, ...] = ()  # where a step ran (the first run's extra)

    def predicted_peak(self, batch: int) -> float:
        return self.fixed_bytes + self.bytes_per_sample * batch


def line(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """(fixed, per sample) of the line through the two points nearest the largest batch (the
    confirmation's neighbourhood: the peak bends a little at small batches)."""
    (b1, p1), (b2, p2) = sorted(points)[-2:]
    if b1 == b2:
        raise ValueError(f"two points at one batch ({b1}) give no line")
    slope = (p2 - p1) / (b2 - b1)
    return p1 - slope * b1, slope


def largest_within(fixed: float, per_sample: float, budget: float, step: int, top: int) -> int:
    """The largest multiple of step, at most top, whose fixed + per_sample * batch stays within
    budget; 0 where not even step does. A flat or falling line: top (the batch costs nothing)."""
    top = top // step * step
    if fixed + per_sample * step > budget:
        return 0
    if per_sample <= 0:
        return top
    # floor division can land one step high where the float is just over: step it back
    batch = min(top, math.floor((budget - fixed) / per_sample) // step * step)
    while batch > step and fixed + per_sample * batch > budget:
        batch -= step
    return max(step, batch)


def compiled_memory_module(framework: str) -> str | None:
    """The framework's compile-only module, or None where its backend offers none (or its
    backend cannot even be loaded here)."""
    from membench import registry

    try:
        backend = type(registry.load_backend(framework))
    except Exception:  # an unknown framework or one whose backend fails to import
        return None
    return backend.compiled_memory_module()


def run_compile(
    framework: str, cell: dict[str, Any], run_step: bool = False, timeout: float = COMPILE_TIMEOUT
) -> dict[str, Any]:
    """One compile-only process for a cell (a Cell's dict), under the framework's
    interpreter; its JSON report, or CompiledGuessFailed with the reason."""
    module = compiled_memory_module(framework)
    if module is None:
        raise CompiledGuessFailed(f"{framework} has no compile-only memory report")
    try:
        python = framework_python(framework)
    except Exception as exc:  # InterpreterError: a bad interpreter setting, said as the reason
        raise CompiledGuessFailed(f"no interpreter for {framework}: {exc}") from exc
    command = [python, "-m", module, json.dumps(cell, sort_keys=True)]
    command += ["--run-step"] if run_step else []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    where = f"{cell['workload']} {framework} {cell['strategy']} at batch {cell['batch_size']}"
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO_ROOT
        )
    except subprocess.TimeoutExpired as exc:
        raise CompiledGuessFailed(f"compiling {where} took over {timeout:.0f} s") from exc
    except OSError as exc:
        raise CompiledGuessFailed(f"compiling {where}: {exc}") from exc
    lines = done.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (done.stderr or done.stdout).strip()[-500:]
        raise CompiledGuessFailed(
            f"compiling {where} printed no report (exit {done.returncode}): {tail}"
        ) from None
    if report.get("status") != "ok":
        raise CompiledGuessFailed(
            f"compiling {where}: {report.get('status')}: {report.get('reason', '')}"
        )
    return report


def first_batches(step: int, max_batch: int) -> tuple[int, int]:
    """The two batches compiled first: FIRST_BATCH and SPREAD times it, in multiples of step
    and within max_batch (two distinct batches wherever max_batch holds two steps)."""
    top = max(step, max_batch // step * step)
    first = min(top, max(step, math.ceil(FIRST_BATCH / step) * step))
    second = min(top, first * SPREAD)
    if second == first:
        first = max(step, (second // 2) // step * step)
    return first, second


def predict_from(
    compile_at: Callable[[int, bool], CompiledPoint],
    budget_bytes: float,
    max_batch: int,
    step: int,
    confirm: bool = True,
) -> CompiledPrediction:
    """The search's arithmetic over compile_at(batch, run_step) -> CompiledPoint: two first
    batches, each also running its first step (the first run's extra, a line in the batch);
    XLA's line plus that extra, raised by the largest rest seen; its largest batch within the
    budget; then (confirm) that batch compiled, no step run, and the line redrawn through it
    and the compiled batch nearest it."""
    b1, b2 = first_batches(step, max_batch)
    compiled = {b: compile_at(b, True) for b in dict.fromkeys((b1, b2))}
    extra = {}  # what a first execution adds beyond what is resident and XLA's run buffers
    for b, point in compiled.items():
        if point.checked_first_step is None:
            raise CompiledGuessFailed(f"the step run at batch {b} reported no peak")
        extra[b] = point.checked_first_step - point.held_after_compile - point.run_buffers
    extra_fixed, extra_slope = line(list(extra.items())) if len(extra) > 1 else (extra[b1], 0.0)

    def first_run(batch: int) -> float:
        return max(0.0, extra_fixed + extra_slope * batch)

    def answer(near: int) -> tuple[int, float, float, float]:
        # The slope is XLA's (exact) and the first run's; the rest (interpreter, jaxlib, the
        # compiler's leftovers in the heap) is the largest seen: the leftovers vary by ~100
        # MiB from process to process, and a batch fits only if it fits in every one.
        rest = max(p.base(first_run(b)) - first_run(b) for b, p in compiled.items())
        floor = max(p.held_through_build for p in compiled.values())
        others = [b for b in compiled if b != near]
        if not others:  # max_batch allows one batch only: it fits or not
            fixed, per_sample = compiled[near].xla_bytes + first_run(near), 0.0
        else:
            nearest = min(others, key=lambda b: abs(b - near))
            pair = [(b, compiled[b].xla_bytes + first_run(b)) for b in (near, nearest)]
            fixed, per_sample = line(pair)
        fixed += rest
        batch = 0 if floor > budget_bytes else (
            largest_within(fixed, per_sample, budget_bytes, step, max_batch)
        )  # fmt: skip
        return batch, fixed, per_sample, rest

    batch, fixed, per_sample, rest = answer(max(compiled))
    if confirm and batch and batch not in compiled:
        compiled[batch] = compile_at(batch, False)
        batch, fixed, per_sample, rest = answer(batch)
    basis = (
        f"XLA compiled at batch {', '.join(map(str, sorted(compiled)))}: its buffers' line "
        f"(arguments, temp, outputs not aliased, inputs held), the first run's extra "
        f"({first_run(b1) / 2**20:.0f} MiB at {b1}, {first_run(b2) / 2**20:.0f} at {b2}: one "
        f"step each) and the largest rest seen, {rest / 2**20:.0f} MiB"
    )
    # each compiled batch's own predicted peak (XLA's bytes there, not the line's)
    points = [(b, rest + p.xla_bytes + first_run(b)) for b, p in sorted(compiled.items())]
    return CompiledPrediction(batch, per_sample, fixed, basis, points, rest, (b1, b2))


def compiled_guess(
    workload: str,
    framework: str,
    strategy: str,
    preset: str,
    budget_bytes: float,
    max_batch: int,
    step: int,
    timeout: float = COMPILE_TIMEOUT,
    confirm: bool = True,
) -> CompiledPrediction | None:
    """The largest multiple of step (at most max_batch) whose predicted whole-life peak host
    RSS stays within budget_bytes, from the framework's compiled step; None for a framework
    without a compile-only report. Raises CompiledGuessFailed (its reason) when a compile
    fails or runs past timeout seconds."""
    if compiled_memory_module(framework) is None:
        return None

    def compile_at(batch: int, run_step: bool) -> CompiledPoint:
        cell = {
            "workload": workload, "framework": framework, "strategy": strategy,
            "batch_size": batch, "preset": preset,
        }  # fmt: skip
        return CompiledPoint.from_report(run_compile(framework, cell, run_step, timeout))

    return predict_from(compile_at, budget_bytes, max_batch, step, confirm)
