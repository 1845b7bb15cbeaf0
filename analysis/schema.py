"""The tidy results table: one row per (source, cell, metric). Framework-free.

Every loader output has exactly COLUMNS. A cell that did not end `ok` still has its rows
(one per core metric), with value NaN and its status and reason, so tables show statuses.
"""

from __future__ import annotations

from dataclasses import dataclass

COLUMNS = [
    "source",  # "record" (the runner's Record) or "asv" (an asv result file)
    "machine",  # results/<machine> name, e.g. cpu-x86_64-2core-24gib
    "device",  # "cpu" or the GPU's name, e.g. "NVIDIA H100 80GB HBM3"
    "framework",  # torch, jax, jittor
    "framework_version",
    "environment",  # "default" (the installed env) or a version env's label, e.g. jax-0.10.2
    "workload",
    "strategy",
    "batch_size",  # int
    "preset",  # smoke, cpu, gpu ("" where the source does not say)
    "commit",  # git commit of the suite that measured it
    "started_at",  # ISO timestamp of the measurement
    "status",  # ok, oom, unsupported, timeout, error (asv rows: ok or n/a)
    "reason",
    "metric",  # a key of METRICS
    "layer",  # host, device-allocator, device-process, speed, analytic, compiler
    "value",  # float; NaN where not measured
    "unit",  # bytes, samples/s, s, count
    "spread_low",  # 25th percentile of the samples behind value (step times), else NaN
    "spread_high",  # 75th percentile
    "n_samples",  # number of samples behind value (step times), else 1
    "path",  # the file the row came from
]


@dataclass(frozen=True)
class Metric:
    layer: str
    unit: str
    label: str  # for tables and axes
    higher_is_better: bool = False


METRICS: dict[str, Metric] = {
    "peak_host_rss_bytes": Metric("host", "bytes", "peak host RSS"),
    "peak_host_rss_delta_bytes": Metric("host", "bytes", "host RSS added by a step"),
    "first_step_peak_host_rss_bytes": Metric("host", "bytes", "peak host RSS, first step"),
    "peak_device_allocated_bytes": Metric("device-allocator", "bytes", "device allocated peak"),
    "peak_device_reserved_bytes": Metric("device-allocator", "bytes", "device reserved peak"),
    "peak_device_process_bytes": Metric("device-process", "bytes", "device process peak (NVML)"),
    "analytic_floor_bytes": Metric("analytic", "bytes", "params + grads + optimizer state"),
    "throughput_samples_per_second": Metric("speed", "samples/s", "throughput", True),
    "step_seconds_median": Metric("speed", "s", "step time (median)"),
    "first_step_seconds": Metric("speed", "s", "first step time"),
    "compile_seconds": Metric("speed", "s", "compile time"),
    "host_rss_after_import_bytes": Metric("host", "bytes", "host RSS after the framework's import"),
    "host_rss_after_build_bytes": Metric("host", "bytes", "host RSS after building model and data"),
    "host_rss_baseline_bytes": Metric("host", "bytes", "host RSS before the measured steps"),
    # The analytic memory model (membench.memory_model) and its error against the measured peak
    "predicted_peak_bytes": Metric("analytic", "bytes", "predicted peak"),
    "predicted_runtime_bytes": Metric("analytic", "bytes", "predicted: runtime (measured)"),
    "predicted_parameters_bytes": Metric("analytic", "bytes", "predicted: parameters"),
    "predicted_gradients_bytes": Metric("analytic", "bytes", "predicted: gradients"),
    "predicted_optimizer_state_bytes": Metric("analytic", "bytes", "predicted: optimizer state"),
    "predicted_inputs_bytes": Metric("analytic", "bytes", "predicted: input batch"),
    "predicted_activations_bytes": Metric("analytic", "bytes", "predicted: activations"),
    "memory_prediction_error": Metric("analytic", "fraction", "prediction error (pred/meas - 1)"),
    # Context: other processes' share of the host CPU during the measured steps.
    "host_foreign_cpu_share": Metric("context", "fraction", "CPU share of other processes"),
    # XLA's static analysis of the compiled step (JAX): what the compiler plans to allocate.
    "xla_temp_bytes": Metric("compiler", "bytes", "XLA temp buffers"),
    "xla_argument_bytes": Metric("compiler", "bytes", "XLA argument buffers"),
    "xla_output_bytes": Metric("compiler", "bytes", "XLA output buffers"),
    "xla_alias_bytes": Metric("compiler", "bytes", "XLA aliased (donated) buffers"),
    "xla_flops": Metric("compiler", "count", "XLA flops per step"),
}

# The metrics every cell gets a row for, measured or not (status rows for non-ok cells).
CORE_METRICS = [
    "peak_host_rss_bytes",
    "peak_host_rss_delta_bytes",
    "peak_device_allocated_bytes",
    "peak_device_reserved_bytes",
    "peak_device_process_bytes",
    "throughput_samples_per_second",
    "step_seconds_median",
    "first_step_seconds",
    "compile_seconds",
]

DEFAULT_ENVIRONMENT = "default"

# The memory metric that tells most, per device kind: the allocator on GPUs, the host on CPUs.
PRIMARY_MEMORY = {"cpu": "peak_host_rss_bytes", "gpu": "peak_device_allocated_bytes"}


def device_kind(device: str) -> str:
    return "cpu" if device == "cpu" else "gpu"
