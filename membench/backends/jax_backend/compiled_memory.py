"""What a JAX cell's step needs, from XLA's own compile: build the session at a batch, lower
and compile its step exactly as its first step would (JaxSession.prepare_step), run nothing,
and report the compiled step's memory analysis beside this process's own host figures.

    python -m membench.backends.jax_backend.compiled_memory '<cell as JSON>' [--run-step]

prints one JSON line (membench.capacity.compiled_guess reads it, under the framework's interpreter).
--run-step then runs one step and adds its measured peak: for checking the prediction only,
never used by it.

The host figures follow the worker's protocol (membench.measure.worker.measure): RSS and VmHWM after
import and build; then freed heap trimmed and VmHWM reset, as before the worker's first step,
so that the compile's own high-water mark is read on the same footing as the first step's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from membench import registry
from membench.backends import BuildSpec, Unsupported, set_up_process
from membench.backends.answer_line import print_answer
from membench.instruments.probes import HostPeakProbe, current_rss_bytes, peak_rss_bytes
from membench.metrics import (
    COMPILE_SECONDS,
    HOST_RSS_AFTER_BUILD_BYTES,
    HOST_RSS_AFTER_IMPORT_BYTES,
)
from membench.records import Cell

FIELDS = ("argument", "output", "alias", "temp", "generated_code")


@dataclass(frozen=True)
class XlaBuffers:
    """compiled.memory_analysis() of one executable, in bytes."""

    argument: int
    output: int
    alias: int  # outputs that reuse a donated argument's buffer: counted once
    temp: int
    generated_code: int

    @property
    def peak(self) -> int:
        """What the executable holds at once while it runs: its arguments, the outputs that do
        not reuse a donated argument, its temporaries and its code (XLA allocates temp as one
        block for the whole run, so it is not a sum over time)."""
        return self.argument + self.output - self.alias + self.temp + self.generated_code


def xla_buffers(compiled: Any) -> XlaBuffers | None:
    """The executable's buffers as XLA planned them; None where the backend gives no analysis."""
    analysis = compiled.memory_analysis()
    if analysis is None:
        return None
    return XlaBuffers(*(int(getattr(analysis, f"{f}_size_in_bytes", 0) or 0) for f in FIELDS))


def _array_bytes(tree: Any) -> int:
    import jax

    return sum(int(a.nbytes) for a in jax.tree_util.tree_leaves(tree) if hasattr(a, "nbytes"))


def resident_input_bytes(session: Any) -> int:
    """Input bytes the session keeps resident that the executable's arguments do not count:
    accumulation's other micro-batches (one compiled call takes one) and a host-data copy."""
    batches = _array_bytes(session.batches)
    one_call = _array_bytes(session.batches[0][: 1 if session.strategy.mode == "infer" else 2])
    host = _array_bytes(session.host_batch) if session.host_batch is not None else 0
    return batches - one_call + host


def measure_cell(cell_json: str, run_step: bool = False) -> dict[str, Any]:
    """Build the cell's session, compile its step (no step run) and report XLA's buffers and
    this process's host figures; with run_step, one step's measured peak after them."""
    cell = Cell.from_dict(json.loads(cell_json))
    if cell.framework != "jax":
        raise Unsupported(f"compiled memory is JAX's; this cell is {cell.framework}'s")
    spec = BuildSpec.of(cell)
    if spec.world_size > 1:  # the analysis is per device; the host holds every device's
        raise Unsupported("compiled memory covers one device: world size 1 only")
    if spec.strategy.lengths != "fixed":  # one executable per length, compiled as it comes
        raise Unsupported("varying lengths compile one executable per length, not one step")
    backend = registry.load_backend("jax")
    if reason := backend.refusal_here(spec):
        raise Unsupported(reason)
    # the worker's set-up before jax is imported (allocator, platforms, precision)
    set_up_process(backend, spec.strategy)
    environment = backend.environment()
    out: dict[str, Any] = {
        "cell": cell.to_dict(),
        "framework_version": environment["framework_version"],
        "device": environment["device"],
        HOST_RSS_AFTER_IMPORT_BYTES: current_rss_bytes(),
    }
    session = backend.build(spec)
    out[HOST_RSS_AFTER_BUILD_BYTES] = current_rss_bytes()
    out["host_hwm_through_build_bytes"] = peak_rss_bytes()  # import and build together
    host = HostPeakProbe()
    out["host_rss_before_compile_bytes"] = host.reset()  # as the worker's first step starts
    t0 = time.perf_counter()
    session.prepare_step()  # JAX's first-step compile, the step itself not run
    out[COMPILE_SECONDS] = time.perf_counter() - t0
    out["host_hwm_through_compile_bytes"] = host.read().peak_bytes
    out["host_rss_after_compile_bytes"] = current_rss_bytes()
    buffers = xla_buffers(session._compiled)
    if buffers is None:
        raise RuntimeError("XLA gave no memory analysis for the compiled step")
    out["xla"] = asdict(buffers)
    out["xla_peak_bytes"] = buffers.peak
    out["resident_input_bytes"] = resident_input_bytes(session)
    out["calls_per_step"] = len(session.batches) if spec.strategy.mode == "train" else 1
    if run_step:
        session.step()
        out["checked_first_step_peak_bytes"] = host.read().peak_bytes
        out["checked_life_peak_bytes"] = peak_rss_bytes()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cell", help="the Cell as JSON (membench.records.Cell)")
    parser.add_argument(
        "--run-step", action="store_true", help="also run one step and report its peak (checks)"
    )
    args = parser.parse_args(argv)
    return print_answer(lambda: measure_cell(args.cell, args.run_step))


if __name__ == "__main__":
    sys.exit(main())
