"""The worker: measures one cell in this (fresh) process and writes its Record.

    python -m membench.measure.worker --cell '{"workload": ...}' --out record.json

The worker owns the protocol; backends only make the framework calls:
  1. environment set before the framework is imported, and recorded;
  2. build, then the first step timed apart (it holds compilation and lazy allocation);
  3. warm-up until step time is stable (a floor of steps, a cap on time);
  4. every resettable peak reset (framework allocator, host VmHWM after gc + malloc_trim);
  5. measured steps, each synchronized and timed, with the parts the session times apart
     (host-to-device copy, collector); NVML sampled in a thread on GPUs;
  6. peaks read; raw step times kept.
The record's room on disk is taken before the framework is imported (records.ReservedJson),
so a disk that fills while the cell measures cannot cost its figures; where there is no room
at all, the worker exits with records.NO_SPACE_EXIT, its record printed to its log if it has
one, and the runner names the cause.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from contextlib import nullcontext, suppress
from pathlib import Path

from membench import registry
from membench.backends import (
    Backend,
    BuildSpec,
    Session,
    Unsupported,
    checked_environment,
    set_up_process,
)
from membench.backends.phases import COLLECTOR, TRANSFER
from membench.environment import detected_device, host_environment
from membench.instruments import lifeline
from membench.instruments import marks as phase
from membench.instruments.probes import (
    ForeignCpuProbe,
    HostPeakProbe,
    NvmlReader,
    PeakSampler,
    current_rss_bytes,
)
from membench.memory.memory_model import model_state_error, predict
from membench.memory.predictions import prediction, stored_calibration
from membench.metrics import (
    BUILD_SECONDS,
    BUSY_METRIC,
    COLLECTOR_SECONDS_PER_STEP,
    COLLECTOR_SHARE,
    COMPILE_SECONDS,
    COMPUTE_SECONDS_MEDIAN,
    FIRST_STEP_PEAK_HOST_RSS_BYTES,
    FIRST_STEP_SECONDS,
    HOST_RSS_AFTER_BUILD_BYTES,
    HOST_RSS_AFTER_IMPORT_BYTES,
    HOST_RSS_BASELINE_BYTES,
    HOST_RSS_GROWTH_BYTES,
    LIFE_OWN_METRIC,
    MODEL_STATE_BYTES,
    MODEL_STATE_PREDICTION_ERROR,
    OPTIMIZER_STATE_BYTES,
    PARAMETER_BYTES,
    PEAK_DEVICE_PROCESS_BYTES,
    PEAK_HOST_RSS_BYTES,
    PEAK_HOST_RSS_DELTA_BYTES,
    PREDICTED_MODEL_STATE_BYTES,
    STATE_BYTES_AT_BUILD,
    STEP_SECONDS_MEAN,
    STEP_SECONDS_MEDIAN,
    THROUGHPUT,
    TRANSFER_SECONDS_MEDIAN,
    WARMUP_STEPS,
    over_ranks,
)
from membench.records import (
    NO_SPACE_ERRNOS,
    NO_SPACE_EXIT,
    Cell,
    Record,
    ReservedJson,
    timestamp,
    write_json_atomic,
)


def _timed_step(session: Session) -> float:
    start = time.perf_counter()
    session.step()
    return time.perf_counter() - start


def measured_steps(session: Session, n: int) -> tuple[list[float], list[dict[str, float]]]:
    """n timed steps, and the parts of each the session timed apart."""
    times, phases = [], []
    for _ in range(n):
        phase.mark(phase.STEP)
        times.append(_timed_step(session))
        phases.append(session.step_phases())
    return times, phases


def phase_metrics(step_times: list[float], phases: list[dict[str, float]]) -> dict[str, float]:
    """The copy and the collector apart from compute, where the session timed them. The
    collector runs every k steps: its time is a mean per step and a share of all step time."""
    if not any(phases):
        return {}
    out: dict[str, float] = {}
    transfer = [p.get(TRANSFER, 0.0) for p in phases]
    collector = [p.get(COLLECTOR, 0.0) for p in phases]
    if any(TRANSFER in p for p in phases):
        out[TRANSFER_SECONDS_MEDIAN] = statistics.median(transfer)
    if any(COLLECTOR in p for p in phases):
        out[COLLECTOR_SECONDS_PER_STEP] = sum(collector) / len(collector)
        out[COLLECTOR_SHARE] = sum(collector) / sum(step_times)
    compute = [t - a - b for t, a, b in zip(step_times, transfer, collector, strict=True)]
    out[COMPUTE_SECONDS_MEDIAN] = statistics.median(compute)
    return out


def warm_up(session: Session, preset: registry.Preset) -> list[float]:
    """Step until two consecutive steps agree within the preset's tolerance."""
    times: list[float] = []
    deadline = time.perf_counter() + preset.warmup_max_seconds
    while True:
        times.append(_timed_step(session))
        stable = False
        if len(times) >= max(2, preset.warmup_min_steps):
            a, b = times[-2], times[-1]
            stable = abs(a - b) <= preset.warmup_tolerance * min(a, b)
        late = len(times) >= preset.warmup_min_steps and time.perf_counter() >= deadline
        # the ranks of a cell stop together: one stepping alone would wait in a collective
        if session.readings.all_ranks(stable or late):
            return times


def _nvml_reader(environment: dict[str, object]) -> NvmlReader | None:
    """NVML's reader, made before the framework touches the GPU, so that its fallback
    baseline (device-used minus baseline) holds no memory of ours."""
    if detected_device() != "cuda":
        return None
    try:
        return NvmlReader()
    except Exception as exc:  # the device layer is then missing, and the record says why
        environment["nvml_unavailable"] = f"{type(exc).__name__}: {exc}"
        return None


def measure(cell: Cell, backend: Backend, set_up: dict[str, object]) -> Record:
    """Run the protocol for one cell (its process set up: set_up_process's entries);
    exceptions propagate to classify()."""
    preset = registry.preset(cell.preset)
    spec = BuildSpec.of(cell)
    record = Record(cell=cell, status="ok")
    record.environment = {
        **host_environment(),
        **set_up,
        "workload_inputs": dict(spec.size.inputs),  # names the configuration that ran
    }
    nvml = _nvml_reader(record.environment)
    # the device guard: a cell meant for the GPU ends `error` if the framework runs elsewhere
    record.environment.update(checked_environment(backend, preset, detected_device()))
    host = HostPeakProbe()
    metrics = record.metrics
    # the stages of the step's memory: the framework alone, then with model, data, optimizer
    metrics[HOST_RSS_AFTER_IMPORT_BYTES] = float(current_rss_bytes())

    phase.mark(phase.BUILD)
    t0 = time.perf_counter()
    session = backend.build(spec)
    metrics[BUILD_SECONDS] = time.perf_counter() - t0
    metrics[HOST_RSS_AFTER_BUILD_BYTES] = float(current_rss_bytes())
    at_build = session.static_metrics()  # what the model and optimizer hold before any step
    metrics[STATE_BYTES_AT_BUILD] = at_build.get(PARAMETER_BYTES, 0.0) + at_build.get(
        OPTIMIZER_STATE_BYTES, 0.0
    )
    if phase.marking():  # for the runner's timeline (it takes the key out of the record)
        record.environment["step_phases_marked"] = session.readings.marked_step_phases()
    host.reset()
    phase.mark(phase.FIRST_STEP)
    metrics[FIRST_STEP_SECONDS] = _timed_step(session)
    first = host.read()
    metrics[FIRST_STEP_PEAK_HOST_RSS_BYTES] = float(first.peak_bytes)

    phase.mark(phase.WARM_UP)
    warm = warm_up(session, preset)
    metrics[WARMUP_STEPS] = float(len(warm))

    session.readings.reset_peaks()
    baseline = host.reset()
    on_gpu = nvml is not None and record.environment.get("device") == "cuda"
    sampler = PeakSampler(nvml) if on_gpu else nullcontext()
    foreign = ForeignCpuProbe()
    phase.mark(phase.MEASURED)
    with sampler:
        step_times, phases = measured_steps(session, preset.measure_steps)
    peak = host.read()
    phase.mark(phase.AFTER)
    # what the steps left resident (freed heap the allocator kept, shapes' caches)
    metrics[HOST_RSS_GROWTH_BYTES] = float(current_rss_bytes() - baseline)
    metrics[BUSY_METRIC] = foreign.read()

    median = statistics.median(step_times)
    metrics.update(
        {
            STEP_SECONDS_MEDIAN: median,
            # periodic work (a collector every k steps) shows in the mean, not the median
            STEP_SECONDS_MEAN: statistics.fmean(step_times),
            THROUGHPUT: cell.batch_size / median,
            # first step minus a steady step: tracing, compilation, autotuning, lazy init
            COMPILE_SECONDS: max(0.0, metrics[FIRST_STEP_SECONDS] - median),
            PEAK_HOST_RSS_BYTES: float(peak.peak_bytes),
            HOST_RSS_BASELINE_BYTES: float(baseline),
            PEAK_HOST_RSS_DELTA_BYTES: float(peak.delta_bytes),
        }
    )
    if isinstance(sampler, PeakSampler) and sampler.peak is not None:
        metrics[PEAK_DEVICE_PROCESS_BYTES] = float(sampler.peak)
        record.environment["nvml_samples"] = sampler.samples
        # the method that gave the peak, and how many readings each method gave
        record.environment["nvml_method"] = nvml.peak_method
        record.environment["nvml_methods"] = dict(nvml.methods)
        if nvml.process_error:
            record.environment["nvml_process_error"] = nvml.process_error
    # the whole life's own peak, read after the steps (the runner adds the group's others)
    metrics[LIFE_OWN_METRIC] = float(host.life_peak())
    metrics.update(phase_metrics(step_times, phases))
    metrics.update(session.readings.memory())
    metrics.update(session.static_metrics())
    record.step_times = step_times
    record.environment["strategy_notes"] = session.notes()
    env = record.environment
    calibration = stored_calibration(cell, env)
    metrics.update(prediction(cell, dict(spec.size.inputs), metrics, env, calibration))
    if devices := session.readings.rank_metrics():  # one process driving the cell's W devices
        record.ranks = devices
        metrics.update(device_summary(cell, spec, devices))
    if phase.lost:  # the timeline's marks stopped (a full disk): the figures stand
        record.environment["marks_error"] = phase.lost
    return record


def trace_cell(cell: Cell, trace_dir: Path) -> dict[str, object]:
    """`--trace`, in a worker of its own after the measured one (so no view's cost or failure
    touches the cell's record): build, the first step, then one step under the framework's own
    memory view; its files named relative to the store, or why there is none."""
    try:
        spec = BuildSpec.of(cell)
        backend = registry.load_backend(cell.framework)
        set_up_process(backend, spec.strategy, spec.world_size)
        session = backend.build(spec)
        session.step()  # compilation and lazy allocation stay out of the view's step
        trace_dir.mkdir(parents=True, exist_ok=True)
        files = session.readings.trace_step(trace_dir / cell.key)
    except Unsupported as exc:
        return {"unavailable": str(exc)}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:1000]}
    return {"files": {what: f"{trace_dir.name}/{name}" for what, name in files.items()}}


def device_summary(cell: Cell, spec: BuildSpec, devices: list[dict[str, float]]) -> dict:
    """The max and sum over devices of each device's memory, and the model-state error of
    the busiest device (membench.measure.distributed's names)."""
    from membench.measure.distributed import summarise_ranks

    out = {k: v for k, v in summarise_ranks(devices, cell.batch_size).items() if "_over_ranks" in k}
    predicted = predict(
        cell.workload, spec.strategy, cell.batch_size, spec.size.inputs,
        world_size=cell.world_size,
    )  # fmt: skip
    measured = out.get(over_ranks(MODEL_STATE_BYTES, "max"))
    if predicted is not None and measured:
        out[PREDICTED_MODEL_STATE_BYTES] = predicted.model_state
        out[MODEL_STATE_PREDICTION_ERROR] = model_state_error(predicted, measured)
    return out


def classify(cell: Cell, backend: Backend | None, exc: BaseException) -> Record:
    """Turn an exception into the Record it means."""
    if isinstance(exc, Unsupported):
        return Record(cell=cell, status="unsupported", reason=str(exc))
    if isinstance(exc, registry.UnknownNameError):
        return Record(cell=cell, status="error", reason=str(exc))
    message = f"{type(exc).__name__}: {exc}".strip()
    if backend is not None and backend.is_oom(exc):
        return Record(cell=cell, status="oom", reason=message[:2000])
    tail = "".join(traceback.format_exception(exc)[-3:])
    return Record(cell=cell, status="error", reason=message[:2000], environment={"traceback": tail})


def run_cell(cell: Cell) -> Record:
    started = timestamp()
    t0 = time.perf_counter()
    backend: Backend | None = None
    try:
        registry.workload(cell.workload)
        spec = BuildSpec.of(cell)
        backend = registry.load_backend(cell.framework)
        # the backend's declarations decide, before the framework is imported
        if reason := backend.refusal_here(spec):
            raise Unsupported(reason)
        set_up = set_up_process(backend, spec.strategy, spec.world_size)
        record = measure(cell, backend, set_up)
    except Exception as exc:  # every ending becomes a Record
        record = classify(cell, backend, exc)
        try:
            # The device the cell was meant for, so a failure sorts with its device's results.
            record.environment = {
                **host_environment(),
                "device": detected_device(),
                **record.environment,
            }
        except Exception:  # the failure may be the environment itself; keep the reason
            pass
    record.started_at = started
    record.wall_seconds = time.perf_counter() - t0
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", required=True, help="the Cell as JSON")
    parser.add_argument("--out", required=True, type=Path, help="where to write the Record")
    parser.add_argument("--parent", type=int, help="the runner's PID: end with it")
    parser.add_argument("--deadline", type=float, help="seconds after which this process ends")
    parser.add_argument("--marks", type=Path, help="where to mark the cell's phases (timeline)")
    parser.add_argument(
        "--trace-dir", type=Path,
        help="instead of measuring: write the framework's memory view of a step here",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.marks:
        phase.open_marks(args.marks)
        phase.mark(phase.IMPORT)
    if args.parent:
        lifeline.bind_to_parent(args.parent)
    if args.deadline:
        lifeline.arm_deadline(args.deadline)
    lifeline.first_to_go()
    cell = Cell.from_dict(json.loads(args.cell))
    if args.trace_dir:
        write_json_atomic(args.out, trace_cell(cell, args.trace_dir))
        return 0
    try:
        room = ReservedJson(args.out)  # before measuring: nothing to lose yet
    except OSError as exc:
        if exc.errno not in NO_SPACE_ERRNOS:
            raise
        _say(f"{cell.key}: not measured: no room for its record ({exc.strerror})")
        return NO_SPACE_EXIT
    record = run_cell(cell)
    try:
        room.write(record.to_dict())  # first: everything after it is optional
    except OSError as exc:
        if exc.errno not in NO_SPACE_ERRNOS:
            raise
        _say(json.dumps(record.to_dict(), sort_keys=True))  # the figures, where the log has room
        _say(f"{cell.key}: its record found no room ({exc.strerror})")
        return NO_SPACE_EXIT
    _say(f"{cell.key}: {record.status} {record.reason}".strip())
    return 0


def _say(line: str) -> None:
    """One line to the log (stderr), unbuffered, where the disk has room for it: a full disk
    must not turn a written record into a failed worker."""
    with suppress(OSError):
        os.write(sys.stderr.fileno(), f"{line}\n".encode())


if __name__ == "__main__":
    sys.exit(main())
