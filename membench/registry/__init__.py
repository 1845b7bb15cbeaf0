"""The one list of workloads, strategies, presets and frameworks, a module per kind:
knobs (the values a strategy sets), strategies, presets, frameworks (each declared once),
workloads. Everything the suite can measure is named here. Nothing in it imports a
framework: backends are referenced by module path and imported by load_backend, in the worker
and in the parent too (planning, the workers' launch and capacity read their declarations:
what each runs, why it refuses), which is cheap because a backend imports its framework inside
its methods only.
"""

from __future__ import annotations

from membench.registry.frameworks import (
    FRAMEWORKS,
    Framework,
    framework,
    framework_installed,
    load_backend,
    register_framework,
)
from membench.registry.knobs import (
    SWAPPING_ALLOCATORS,
    AccumulateMode,
    Allocator,
    Attention,
    Data,
    Lengths,
    Matmul,
    Mode,
    Models,
    Precision,
    Sharding,
    Strategy,
    knob_defaults,
)
from membench.registry.plugins import PLUGINS_ENV, load_plugins
from membench.registry.presets import (
    CALIBRATION_PRESET,
    CALIBRATION_STRATEGIES,
    EVAL_PROBE_CPU,
    EVAL_PROBE_GPU,
    EVAL_PROBE_QUICK,
    GPT2_SMALL,
    PRESETS,
    QUICK_STRATEGIES,
    RELEASES_PRESET,
    SELFCHECK_IMAGE_SIZE_ENV,
    SELFCHECK_STRATEGIES,
    TRANSFORMER_CPU,
    TRANSFORMER_SHARD,
    TRANSFORMER_TINY,
    LeftOut,
    Preset,
    Timing,
    WorkloadSize,
    calibration_batches,
    preset,
    selfcheck_preset,
    world_size_of,
)
from membench.registry.strategies import SHARDING_STRATEGIES, STRATEGIES, strategy
from membench.registry.workloads import WORKLOADS, Workload, register_workload, workload
from membench.unknown_names import UnknownNameError

__all__ = [
    "CALIBRATION_PRESET", "CALIBRATION_STRATEGIES", "EVAL_PROBE_CPU", "EVAL_PROBE_GPU",
    "EVAL_PROBE_QUICK", "FRAMEWORKS", "GPT2_SMALL", "PLUGINS_ENV", "PRESETS", "QUICK_STRATEGIES",
    "RELEASES_PRESET", "SELFCHECK_IMAGE_SIZE_ENV", "SELFCHECK_STRATEGIES", "SHARDING_STRATEGIES",
    "STRATEGIES", "SWAPPING_ALLOCATORS", "TRANSFORMER_CPU", "TRANSFORMER_SHARD",
    "TRANSFORMER_TINY", "WORKLOADS", "AccumulateMode", "Allocator", "Attention", "Data",
    "Framework", "Lengths", "LeftOut", "Matmul", "Mode", "Models", "Precision", "Preset",
    "Sharding", "Strategy", "Timing", "UnknownNameError", "Workload", "WorkloadSize",
    "calibration_batches", "framework", "framework_installed", "knob_defaults", "load_backend",
    "load_plugins", "preset", "register_framework", "register_workload", "selfcheck_preset",
    "strategy", "workload", "world_size_of",
]  # fmt: skip
