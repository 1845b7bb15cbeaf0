"""The one catalogue of metrics: every figure a Record may carry, defined once.

Each metric names its layer (where in the stack the figure was read), its unit, a label, which
direction is better, and, where tracked, its asv benchmark and its column in the run's summary
table. asv's track_ methods, the summary table, the tidy schema, `membench compare` and the
report derive from this list; a metric a record carries that is not here is a loader problem,
never dropped silently. Framework-free, no pandas.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

MIB = 2**20  # bytes are shown in MiB

# Where a figure is read. Memory layers differ in what they hold (docs/methodology.md).
LAYERS = {
    "host": "the process's resident memory as the kernel counts it",
    "host-allocator": "host memory a framework's own allocator holds (used + cached)",
    "device-allocator": "device memory a framework's allocator holds (tensors, or its reserve)",
    "device-process": "device memory NVML charges to the process (context, workspaces)",
    "model": "sizes of the live parameters, gradients and optimizer state",
    "analytic": "computed from the architecture spec and the strategy",
    "compiler": "the compiler's static view of the compiled step",
    "speed": "wall time",
    "protocol": "how the measurement protocol ran",
    "context": "what else the host was doing",
}
Better = Literal["lower", "higher", "neither"]
# Every record's own wall time, read off the Record (not its metrics) by the loader.
CELL_WALL = "cell_wall_seconds"


@dataclass(frozen=True)
class Metric:
    name: str
    layer: str
    unit: str  # bytes, s, samples/s, count, fraction
    label: str  # for tables and axes
    better: Better = "lower"
    asv: str = ""  # the asv track_ benchmark that reports it ("" if not tracked)
    description: str = ""  # the asv benchmark's docstring
    summary: str = ""  # column header in the run's summary table ("" if not shown)
    summary_format: str = "{:.0f}"
    # a row for every cell, measured or not (a failed cell shows its status in each)
    core: bool = False
    signed: bool = False  # a difference of two readings: may be below zero
    # the smallest absolute change that counts (`membench compare`), in the metric's unit;
    # None: the unit's and layer's default (change_floor)
    floor: float | None = None
    # asv only: the size of this signed metric, which records carry (asv reads every benchmark
    # as lower is better, so a signed error is published as its magnitude, never as itself)
    magnitude_of: str = ""

    @property
    def may_be_negative(self) -> bool:
        """Whether a value below zero is of this metric's kind (records are checked by it)."""
        return self.signed or self.unit == "fraction"

    @property
    def higher_is_better(self) -> bool:
        return self.better == "higher"

    @property
    def summary_scale(self) -> float:
        """Bytes are shown in MiB, everything else as is."""
        return MIB if self.unit == "bytes" else 1.0


# The first step is one reading (compile time: it minus the median step): on a CPU it moves by
# tens of ms between runs of one cell (the committed records: torch's compile time of one cell
# up to 46 ms apart), and a compile that short compiles nothing worth judging: changes below a
# tenth of a second do not count.
ONE_STEP_FLOOR = 0.1

# The names code writes or reads a metric by (its entry below is named by the same constant)
PEAK_HOST_RSS_BYTES = "peak_host_rss_bytes"
PEAK_HOST_RSS_DELTA_BYTES = "peak_host_rss_delta_bytes"
FIRST_STEP_PEAK_HOST_RSS_BYTES = "first_step_peak_host_rss_bytes"
HOST_RSS_AFTER_IMPORT_BYTES = "host_rss_after_import_bytes"
HOST_RSS_AFTER_BUILD_BYTES = "host_rss_after_build_bytes"
HOST_RSS_BASELINE_BYTES = "host_rss_baseline_bytes"
HOST_RSS_GROWTH_BYTES = "host_rss_growth_bytes"
TIMELINE_PEAK_HOST_RSS_BYTES = "timeline_peak_host_rss_bytes"
TIMELINE_MEASURED_PEAK_HOST_RSS_BYTES = "timeline_measured_peak_host_rss_bytes"
TIMELINE_PEAK_GAP_BYTES = "timeline_peak_gap_bytes"
TIMELINE_OTHERS_PEAK_RSS_BYTES = "timeline_others_peak_rss_bytes"
TIMELINE_SAMPLING_BOUND_BYTES = "timeline_sampling_bound_bytes"
TIMELINE_SAMPLER_CPU_SHARE = "timeline_sampler_cpu_share"
JITTOR_CPU_RESERVED_BYTES = "jittor_cpu_reserved_bytes"
PEAK_DEVICE_ALLOCATED_BYTES = "peak_device_allocated_bytes"
PEAK_DEVICE_RESERVED_BYTES = "peak_device_reserved_bytes"
JITTOR_CUDA_RESERVED_BYTES = "jittor_cuda_reserved_bytes"
PEAK_DEVICE_PROCESS_BYTES = "peak_device_process_bytes"
DEVICE_RESERVED_MINUS_ALLOCATED_BYTES = "device_reserved_minus_allocated_bytes"
TRAINABLE_PARAMETERS = "trainable_parameters"
RUNNING_STATISTICS = "running_statistics"
PARAMETER_BYTES = "parameter_bytes"
GRADIENT_BYTES = "gradient_bytes"
OPTIMIZER_STATE_BYTES = "optimizer_state_bytes"
STATE_BYTES_AT_BUILD = "state_bytes_at_build"
ANALYTIC_FLOOR_BYTES = "analytic_floor_bytes"
MODEL_STATE_BYTES = "model_state_bytes"
DEVICE_LIVE_BUFFER_BYTES = "device_live_buffer_bytes"
STEP_SECONDS_MEDIAN = "step_seconds_median"
FIRST_STEP_SECONDS = "first_step_seconds"
COMPILE_SECONDS = "compile_seconds"
BUILD_SECONDS = "build_seconds"
STEP_SECONDS_MEAN = "step_seconds_mean"
TRANSFER_SECONDS_MEDIAN = "transfer_seconds_median"
COLLECTOR_SECONDS_PER_STEP = "collector_seconds_per_step"
COLLECTOR_SHARE = "collector_share"
COMPUTE_SECONDS_MEDIAN = "compute_seconds_median"
WARMUP_STEPS = "warmup_steps"
XLA_FLOPS = "xla_flops"
JITTOR_JIT_KERNELS_COMPILED_FIRST_STEP = "jittor_jit_kernels_compiled_first_step"
PREDICTED_PEAK_BYTES = "predicted_peak_bytes"
PREDICTED_RUNTIME_BYTES = "predicted_runtime_bytes"
PREDICTED_PARAMETERS_BYTES = "predicted_parameters_bytes"
PREDICTED_GRADIENTS_BYTES = "predicted_gradients_bytes"
PREDICTED_OPTIMIZER_STATE_BYTES = "predicted_optimizer_state_bytes"
PREDICTED_INPUTS_BYTES = "predicted_inputs_bytes"
PREDICTED_ACTIVATIONS_BYTES = "predicted_activations_bytes"
PREDICTED_GATHERED_PARAMETERS_BYTES = "predicted_gathered_parameters_bytes"
PREDICTED_MODEL_STATE_BYTES = "predicted_model_state_bytes"
MODEL_STATE_PREDICTION_ERROR = "model_state_prediction_error"
PREDICTED_PEAK_CALIBRATED_BYTES = "predicted_peak_calibrated_bytes"

_ALL = [
    # -- host memory
    Metric(
        PEAK_HOST_RSS_BYTES, "host", "bytes", "peak host RSS", asv="track_peak_host_rss",
        description="Peak host resident set (VmHWM) over the measured steps, whole process.",
        summary="host peak RSS MiB", core=True,
    ),
    Metric(
        PEAK_HOST_RSS_DELTA_BYTES, "host", "bytes", "host RSS added by a step",
        asv="track_peak_host_rss_delta",
        description="Peak host RSS over the measured steps minus the RSS right before them.",
        summary="host Δ MiB", summary_format="{:.1f}", core=True,
    ),
    Metric(FIRST_STEP_PEAK_HOST_RSS_BYTES, "host", "bytes", "peak host RSS, first step"),
    Metric(
        "life_peak_host_rss_bytes", "host", "bytes", "whole-life peak host RSS (group)",
        description="What a memory limit on the worker's process group meets: the worker's "
        "own VmHWM over its whole life (import, build, first step with compilation, warm-up, "
        "measured steps) plus the highest summed resident memory of the group's other "
        "processes (forked compilers, compile workers), which the runner samples every "
        "0.2 s. A capacity probe on a host fits by it.",
    ),
    Metric(
        "life_peak_own_rss_bytes", "host", "bytes", "whole-life peak host RSS (worker)",
        description="The worker's own VmHWM over its whole life (the kernel's figure, kept "
        "across the resets that scope the first step's and the measured steps' peaks).",
    ),
    Metric(
        "life_peak_others_rss_bytes", "host", "bytes",
        "peak RSS of the worker's other processes (sampled)",
        description="The highest summed resident memory (proportional share where several) "
        "of the other processes in the worker's group, sampled by the runner every 0.2 s: a "
        "process shorter than that may be missed.",
    ),
    Metric(HOST_RSS_AFTER_IMPORT_BYTES, "host", "bytes", "host RSS after the framework's import"),
    Metric(HOST_RSS_AFTER_BUILD_BYTES, "host", "bytes", "host RSS after building model and data"),
    Metric(HOST_RSS_BASELINE_BYTES, "host", "bytes", "host RSS before the measured steps"),
    Metric(
        HOST_RSS_GROWTH_BYTES, "host", "bytes", "host RSS growth over the measured steps",
        description="RSS after the measured steps minus the RSS right before them: what the "
        "steps left resident (freed heap the allocator keeps, caches).", signed=True,
    ),
    # -- the memory timeline (membench.instruments.timeline): sampled by the runner, outside the
    # worker
    Metric(
        TIMELINE_PEAK_HOST_RSS_BYTES, "host", "bytes",
        "peak host RSS of the whole cell (timeline)",
        description="The worker's highest resident memory the runner sampled over the whole "
        "cell: import, build, first step (compilation), warm-up, steps.",
    ),
    Metric(
        TIMELINE_MEASURED_PEAK_HOST_RSS_BYTES, "host", "bytes",
        "peak host RSS over the measured steps (timeline)",
    ),
    Metric(
        TIMELINE_PEAK_GAP_BYTES, "host", "bytes", "VmHWM minus the timeline's peak",
        description="The worker's VmHWM over the measured steps minus the timeline's highest "
        "sample over them: what sampling missed (below zero: memory of other processes of the "
        "group).", signed=True,
    ),
    Metric(
        TIMELINE_OTHERS_PEAK_RSS_BYTES, "host", "bytes",
        "peak RSS of the worker's other processes (timeline)",
        description="The highest summed RSS of the other processes in the worker's group "
        "(other ranks, forked helpers, compilers); pages a fork shares with the worker are "
        "counted again.",
    ),
    Metric(
        TIMELINE_SAMPLING_BOUND_BYTES, "host", "bytes",
        "largest change between two timeline samples",
    ),
    Metric(
        TIMELINE_SAMPLER_CPU_SHARE, "context", "fraction",
        "the timeline sampler's share of one core",
    ),
    Metric(
        JITTOR_CPU_RESERVED_BYTES, "host-allocator", "bytes", "Jittor host allocator reserve",
        summary="Jittor host reserve MiB",
    ),
    # -- device memory
    Metric(
        PEAK_DEVICE_ALLOCATED_BYTES, "device-allocator", "bytes", "device allocated peak",
        asv="track_peak_device_allocated",
        description="Framework allocator peak of live tensors on the device.",
        summary="dev alloc peak MiB", core=True,
    ),
    Metric(
        PEAK_DEVICE_RESERVED_BYTES, "device-allocator", "bytes", "device reserved peak",
        asv="track_peak_device_reserved",
        description="Framework allocator peak of reserved (cached) device memory.",
        summary="dev reserved peak MiB", core=True,
    ),
    Metric(
        JITTOR_CUDA_RESERVED_BYTES, "device-allocator", "bytes",
        "Jittor device allocator reserve",
        summary="Jittor dev reserve MiB",
    ),
    Metric(
        PEAK_DEVICE_PROCESS_BYTES, "device-process", "bytes", "device process peak (NVML)",
        asv="track_peak_device_process",
        description="NVML's peak device memory of the worker process (context and workspaces "
        "included).",
        summary="NVML process peak MiB", core=True,
    ),
    Metric(
        DEVICE_RESERVED_MINUS_ALLOCATED_BYTES, "device-allocator", "bytes",
        "device reserved minus allocated at the end",
        description="The allocator's cached but unused device memory after the measured steps "
        "(fragmentation).",
    ),
    # -- the model's state, read off the live tensors
    Metric(TRAINABLE_PARAMETERS, "model", "count", "trainable parameters", "neither"),
    Metric(RUNNING_STATISTICS, "model", "count", "BatchNorm running statistics", "neither"),
    Metric(PARAMETER_BYTES, "model", "bytes", "parameters"),
    Metric(GRADIENT_BYTES, "model", "bytes", "gradients"),
    Metric(OPTIMIZER_STATE_BYTES, "model", "bytes", "optimizer state"),
    Metric(STATE_BYTES_AT_BUILD, "model", "bytes", "parameters + optimizer state at build"),
    Metric(ANALYTIC_FLOOR_BYTES, "model", "bytes", "params + grads + optimizer state"),
    Metric(
        MODEL_STATE_BYTES, "model", "bytes", "model state held by the rank",
        description="Parameters, gradients and optimizer state this rank (device) holds after a "
        "step: its shards where the strategy shards them.",
    ),
    Metric(
        DEVICE_LIVE_BUFFER_BYTES, "device-allocator", "bytes", "live buffers on the device",
        description="Bytes of every live array's shard on the device after the measured steps "
        "(jax.live_arrays; JAX's sharded cells, one figure per device).",
    ),
    # -- speed
    Metric(
        "throughput_samples_per_second", "speed", "samples/s", "throughput", "higher",
        asv="track_throughput", description="Samples per second at the median measured step time.",
        summary="samples/s", summary_format="{:.2f}", core=True,
    ),
    Metric(
        STEP_SECONDS_MEDIAN, "speed", "s", "step time (median)", asv="track_step_time",
        description="Measured step times, as samples so that asv reports their spread.",
        summary="step s (median)", summary_format="{:.3f}", core=True,
    ),
    Metric(
        FIRST_STEP_SECONDS, "speed", "s", "first step time", asv="track_first_step_time",
        description="Wall time of the first step: compilation, tracing and lazy allocation "
        "included.",
        summary="first step s", summary_format="{:.2f}", core=True, floor=ONE_STEP_FLOOR,
    ),
    Metric(
        COMPILE_SECONDS, "speed", "s", "compile time", asv="track_compile_time",
        description="First step minus the median step: the one-off cost of compiling.",
        core=True, floor=ONE_STEP_FLOOR,
    ),
    Metric(BUILD_SECONDS, "speed", "s", "build time (model, data, optimizer)"),
    Metric(STEP_SECONDS_MEAN, "speed", "s", "step time (mean)"),
    Metric(
        TRANSFER_SECONDS_MEDIAN, "speed", "s", "host-to-device copy per step (median)",
        description="The batch copied from host memory to the device, timed and synchronized "
        "apart from compute.",
    ),
    Metric(COLLECTOR_SECONDS_PER_STEP, "speed", "s", "collector + cache release per step"),
    Metric(
        COLLECTOR_SHARE, "speed", "fraction", "collector's share of step time",
        description="Collector and cache-release time over all measured step time.",
    ),
    Metric(
        COMPUTE_SECONDS_MEDIAN, "speed", "s", "step minus copy and collector (median)",
    ),
    # -- the protocol and its context
    Metric(WARMUP_STEPS, "protocol", "count", "warm-up steps", "neither"),
    Metric(
        CELL_WALL, "protocol", "s", "the cell's wall time",
        description="From the cell's start (its worker's launch) to its record: what measuring "
        "the cell cost the suite, whatever its status (the Record's wall_seconds).",
    ),
    Metric(
        "host_foreign_cpu_share", "context", "fraction", "CPU share of other processes",
        summary="foreign CPU", summary_format="{:.0%}",
    ),
    # -- the compiler's static view
    Metric(
        "xla_temp_bytes", "compiler", "bytes", "XLA temp buffers", asv="track_xla_temp",
        description="XLA's static temp buffer size of the compiled step (memory_analysis; JAX "
        "only).",
    ),
    Metric("xla_argument_bytes", "compiler", "bytes", "XLA argument buffers"),
    Metric("xla_output_bytes", "compiler", "bytes", "XLA output buffers"),
    Metric("xla_alias_bytes", "compiler", "bytes", "XLA aliased (donated) buffers"),
    Metric("xla_generated_code_bytes", "compiler", "bytes", "XLA generated code"),
    Metric(XLA_FLOPS, "compiler", "count", "XLA flops per step", "neither"),
    Metric(
        JITTOR_JIT_KERNELS_COMPILED_FIRST_STEP, "compiler", "count",
        "Jittor kernels compiled in the first step", "neither",
    ),
    # -- the analytic memory model (membench.memory.memory_model) and its errors
    Metric(PREDICTED_PEAK_BYTES, "analytic", "bytes", "predicted peak (spec only)"),
    Metric(
        PREDICTED_RUNTIME_BYTES, "analytic", "bytes",
        "predicted: runtime (records before calibration: measured in the cell itself)",
    ),
    Metric(PREDICTED_PARAMETERS_BYTES, "analytic", "bytes", "predicted: parameters"),
    Metric(PREDICTED_GRADIENTS_BYTES, "analytic", "bytes", "predicted: gradients"),
    Metric(PREDICTED_OPTIMIZER_STATE_BYTES, "analytic", "bytes", "predicted: optimizer state"),
    Metric(PREDICTED_INPUTS_BYTES, "analytic", "bytes", "predicted: input batch"),
    Metric(PREDICTED_ACTIVATIONS_BYTES, "analytic", "bytes", "predicted: activations (spec)"),
    Metric(
        PREDICTED_GATHERED_PARAMETERS_BYTES, "analytic", "bytes",
        "predicted: parameters gathered from the shards during the step (ZeRO-2/3)",
    ),
    Metric(
        PREDICTED_MODEL_STATE_BYTES, "analytic", "bytes",
        "predicted: model state a rank holds between steps (params + grads + optimizer state)",
    ),
    Metric(
        MODEL_STATE_PREDICTION_ERROR, "analytic", "fraction",
        "model state per rank, predicted over measured, minus 1", "neither",
    ),
    Metric(
        PREDICTED_PEAK_CALIBRATED_BYTES, "analytic", "bytes",
        "predicted peak (spec + calibrated constants)",
    ),
    Metric(
        "memory_prediction_error", "analytic", "fraction",
        "prediction error, runtime measured in the cell (records before calibration)",
        "neither",
        description="Records before calibration: the memory model's predicted peak, its runtime "
        "part measured in the cell itself, over the measured one, minus 1.",
    ),
    Metric(
        "memory_prediction_error_spec_only", "analytic", "fraction",
        "prediction error, spec only (pred/meas - 1)", "neither",
    ),
    Metric(
        "memory_prediction_error_calibrated", "analytic", "fraction",
        "prediction error, calibrated (pred/meas - 1)", "neither",
        description="The memory model's peak (spec, strategy and the framework's calibrated "
        "constants) over the measured one, minus 1.",
    ),
    # asv's form of the error above: its size, where lower is better (no record carries it)
    Metric(
        "memory_prediction_abs_error_calibrated", "analytic", "fraction",
        "prediction error's size, calibrated (|pred/meas - 1|)",
        asv="track_memory_prediction_abs_error_calibrated",
        description="How far the memory model's peak (spec, strategy and the framework's "
        "calibrated constants) is from the measured one: |predicted / measured - 1|.",
        magnitude_of="memory_prediction_error_calibrated",
    ),
]  # fmt: skip

# -- multi-rank cells (membench.measure.distributed): each rank measures its own memory; the cell's
# record names the max and the sum over ranks apart, never one silent sum.
RANK_AGGREGATES = {"max": max, "sum": sum}
_PER_RANK_LAYERS = ("host", "host-allocator", "device-allocator", "device-process", "model")


def rank_aggregated(name: str) -> bool:
    """Whether a metric is a rank's own memory, aggregated as max and sum over ranks."""
    m = next((m for m in _ALL if m.name == name), None)
    return m is not None and m.unit == "bytes" and m.layer in _PER_RANK_LAYERS


def over_ranks(name: str, how: str) -> str:
    return f"{name}_{how}_over_ranks"


def _over_ranks(m: Metric, how: str) -> Metric:
    asv = f"{m.asv}_{how}_over_ranks" if m.asv else ""
    label = f"{m.label} ({how} over ranks)"
    description = f"{m.description} The {how} over the cell's ranks (each rank's own figure)."
    return Metric(
        over_ranks(m.name, how), m.layer, m.unit, label, m.better, asv, description,
        signed=m.signed,
    )  # fmt: skip


_ALL += [
    _over_ranks(m, how) for m in list(_ALL) if rank_aggregated(m.name) for how in RANK_AGGREGATES
]

METRICS: dict[str, Metric] = {m.name: m for m in _ALL}
# Metrics every cell gets a row for, measured or not (status rows for cells that did not run).
CORE_METRICS: list[str] = [m.name for m in _ALL if m.core]
# asv benchmark name -> metric
ASV_METRICS: dict[str, str] = {m.asv: m.name for m in _ALL if m.asv}
# The asv benchmark that reports raw samples rather than one number.
ASV_SAMPLES = "track_step_time"


# Other processes' share of the host's CPU while a cell ran (host_foreign_cpu_share) above
# which its speed says more about them than about the cell: `membench bench` flags such a cell
# as it finishes and measures it again at the end of the run; while still busy it stays out of
# asv and out of the tables' speed figures (its record keeps the share), unless recorded with
# --allow-busy, which marks it. `membench compare` does not judge its speed either.
BUSY_SHARE = 0.10
BUSY_METRIC = "host_foreign_cpu_share"
THROUGHPUT = "throughput_samples_per_second"
# A record's environment key: measured on a busy host and recorded anyway (--allow-busy).
BUSY_ALLOWED = "busy_host_allowed"
# Set for asv's benchmark processes by `membench bench --allow-busy` (and by hand around a
# plain `asv run`): a busy cell measured there is marked and recorded.
ALLOW_BUSY_ENV = "MEMBENCH_ALLOW_BUSY"


# Set in the environment of workers that a run launches side by side on one device (capacity
# probes, `membench capacity --side-by-side N`): how many at most; their records keep it.
SIDE_BY_SIDE_ENV = "MEMBENCH_SIDE_BY_SIDE"


def measured_alone(environment: dict[str, object]) -> bool:
    """Whether a record's worker ran alone on its device: a speed measured side by side with
    other workers of the run is theirs as much as its own (its peaks are its own)."""
    env = environment.get("env")
    shared = env.get(SIDE_BY_SIDE_ENV) if isinstance(env, dict) else None
    return shared is None or int(shared) <= 1


def busy_share(metrics: dict[str, float]) -> float | None:
    """The foreign CPU share of a record's metrics where it is above BUSY_SHARE, else None."""
    share = metrics.get(BUSY_METRIC)
    return float(share) if share is not None and float(share) > BUSY_SHARE else None


def quiet_speeds(runs: Iterable[dict[str, float]]) -> list[float]:
    """The samples/s of the runs (their metrics) measured on a quiet host, sorted."""
    return sorted(float(m[THROUGHPUT]) for m in runs if THROUGHPUT in m and busy_share(m) is None)


def share_behind_speed(shares: Iterable[float]) -> float | None:
    """The foreign CPU share behind a speed taken over repeats of one cell (their quiet
    repeats' median): the most of the quiet ones; where every one was busy (no speed), the
    least; None where no repeat says."""
    shares = [float(s) for s in shares]
    quiet = [s for s in shares if busy_share({BUSY_METRIC: s}) is None]
    return max(quiet) if quiet else min(shares, default=None)


def kept_out_as_busy(metrics: dict[str, float], environment: dict[str, object]) -> bool:
    """Whether a record's speed stays out of asv and the tables: busy and not allowed."""
    return busy_share(metrics) is not None and not environment.get(BUSY_ALLOWED)


# `membench compare` counts a change only above both its relative threshold and an absolute
# floor: a relative threshold alone calls 0.4 -> 0.7 MiB a 75% regression, which no reader
# would. Memory a process holds moves by a few MiB from run to run (allocator arenas, page
# cache, lazily loaded libraries): 16 MiB; a compiler's static buffer sizes are exact: 1 MiB;
# times: 1 ms; throughput: 0.1 samples/s; fractions: 0.01; counts: any change.
FLOORS_BY_UNIT = {"bytes": 16 * MIB, "s": 1e-3, "samples/s": 0.1, "fraction": 0.01, "count": 0.0}
FLOORS_BY_LAYER = {"compiler": 1 * MIB}


def change_floor(name: str) -> float:
    """The absolute floor of a metric's change (its own, else its layer's, else its unit's)."""
    m = metric(name)
    if m.floor is not None:
        return m.floor
    if m.unit == "bytes" and m.layer in FLOORS_BY_LAYER:
        return FLOORS_BY_LAYER[m.layer]
    return FLOORS_BY_UNIT.get(m.unit, 0.0)


def metric(name: str) -> Metric:
    """The catalogue's entry; KeyError names the metric."""
    if name not in METRICS:
        raise KeyError(f"metric {name!r} is not in membench.metrics")
    return METRICS[name]


def summary_columns() -> list[Metric]:
    """The run's summary table, in catalogue order."""
    return [m for m in _ALL if m.summary]


# The whole-life peak: the worker writes its own part, the runner adds the group's others.
LIFE_METRIC = "life_peak_host_rss_bytes"
LIFE_OWN_METRIC = "life_peak_own_rss_bytes"
LIFE_OTHERS_METRIC = "life_peak_others_rss_bytes"
# The measured steps' own host peak: beside a host budget's whole-life peak, the steady state.
STEADY_METRIC = PEAK_HOST_RSS_BYTES


def steady_beside(layer: str) -> bool:
    """Whether the measured steps' host peak is the steady state of a budget on this layer:
    of a host budget (the kernel's RSS layer) yes; of a device budget no (the host's RSS is
    another memory), nor of a framework's host allocator."""
    return layer in METRICS and METRICS[layer].layer == "host"


# The memory model's errors, as the worker writes them and analysis reads them (the record's
# environment[PREDICTION_ENV] holds the strategy's mode they were predicted for).
SPEC_ONLY_ERROR = "memory_prediction_error_spec_only"
CALIBRATED_ERROR = "memory_prediction_error_calibrated"
PREDICTION_ENV = "prediction"


# -- each framework's memory readings, declared once: the backends (capacity's budget layer)
# and analysis (a stopped search's layer, a step's cause in the allocator's reserve) read them
# here. device_peaks: the metrics that hold its device peak, best first (capacity fits a batch
# on the first one a probe emits, never on a metric the framework does not emit); reserves:
# the metrics that hold what its allocator keeps (host or device).
@dataclass(frozen=True)
class FrameworkReadings:
    device_peaks: tuple[str, ...] = ("peak_device_allocated_bytes",)
    reserves: tuple[str, ...] = ()


FRAMEWORK_READINGS: dict[str, FrameworkReadings] = {
    # set_per_process_memory_fraction caps the caching allocator's reserve, not its live
    # tensors: an allocation fails when the reserve would pass the limit, however much of it
    # is free but fragmented (GPT-2 small on the H200, amp-bf16-checkpoint: batch 29 out of
    # memory with 5.1 GiB reserved but unallocated, while 28 peaked at 18.7 GiB allocated)
    "torch": FrameworkReadings(
        ("peak_device_reserved_bytes", "peak_device_allocated_bytes"),
        reserves=("peak_device_reserved_bytes",),
    ),
    "jax": FrameworkReadings(("peak_device_allocated_bytes",)),
    # Jittor has no allocator peak: its reserve after each step, else NVML's process figure
    "jittor": FrameworkReadings(
        ("jittor_cuda_reserved_bytes", "peak_device_process_bytes"),
        reserves=("jittor_cpu_reserved_bytes", "jittor_cuda_reserved_bytes"),
    ),
}


def readings(framework: str) -> FrameworkReadings:
    """A framework's readings; a framework not declared here (a plugin's) gets the default:
    its device peak on the allocated one, no reserve."""
    return FRAMEWORK_READINGS.get(framework, FrameworkReadings())


def _each_framework(part: str) -> tuple[str, ...]:
    """Every framework's metrics of one part, each framework's first choice before any
    fallback, each metric once."""
    lists = [getattr(r, part) for r in (*FRAMEWORK_READINGS.values(), FrameworkReadings())]
    ranked = (
        m for rank in range(max(map(len, lists))) for ms in lists for m in ms[rank : rank + 1]
    )
    return tuple(dict.fromkeys(ranked))


# Where the framework is not at hand: every framework's device peaks, first choices first
# (a record emits its own framework's), and every metric that holds an allocator's reserve.
ANY_DEVICE_PEAK = _each_framework("device_peaks")
ANY_RESERVE = _each_framework("reserves")
