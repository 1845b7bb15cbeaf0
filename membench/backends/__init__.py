"""The backend contract: what each framework must provide to the worker.

Backend modules import their framework inside methods only, so that the worker can set
environment variables (allocator knobs, XLA/Jittor flags) before the first import.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass

from membench.registry import Preset, Strategy, WorkloadSize, workload


class Unsupported(Exception):
    """This framework cannot run this cell here; the message says why."""


class DeviceMismatch(RuntimeError):
    """A cell meant for the GPU whose framework would run elsewhere: the cell ends `error`."""


@dataclass(frozen=True)
class BuildSpec:
    workload: str
    strategy: Strategy
    size: WorkloadSize
    batch_size: int
    seed: int = 0


def require_equal_micro_batches(spec: BuildSpec) -> None:
    """Accumulation splits the global batch into k equal micro-batches, or refuses the cell."""
    k = spec.strategy.accumulate
    if k > 1 and spec.batch_size % k:
        raise Unsupported(f"batch {spec.batch_size} does not split into {k} equal micro-batches")


DEVICE_BUDGET_ENV = "MEMBENCH_DEVICE_BUDGET_FRACTION"


def device_budget_fraction() -> float | None:
    """The share of the device's memory a capacity probe may use (set by membench capacity
    in DEVICE_BUDGET_ENV); each backend imposes it with its own limit."""
    raw = os.environ.get(DEVICE_BUDGET_ENV, "")
    if not raw:
        return None
    fraction = float(raw)
    if not 0 < fraction <= 1:
        raise ValueError(f"{DEVICE_BUDGET_ENV} must be in (0, 1], got {raw}")
    return fraction


def model_options(spec: BuildSpec) -> dict[str, object]:
    """The strategy's knobs that a workload's model takes besides checkpointing.

    The attention kind goes to workloads with attention; any other workload refuses a
    strategy that changes it, since there is nothing for the knob to act on.
    """
    attention = spec.strategy.attention
    if workload(spec.workload).attention:
        return {"attention": attention}
    if attention != "plain":
        raise Unsupported(f"{spec.workload} has no attention layer for the knob to change")
    return {}


class Session(ABC):
    """A built model, optimizer and batch, ready to step."""

    @abstractmethod
    def step(self) -> None:
        """One full step (train or infer), returning only when the device is done."""

    def reset_peaks(self) -> None:  # noqa: B027 - optional hook, most backends have peaks
        """Reset the framework's resettable peak counters (if any)."""

    def memory(self) -> dict[str, float]:
        """Framework memory counters read after the measured steps, named by layer."""
        return {}

    def static_metrics(self) -> dict[str, float]:
        """Figures known without running (parameter counts, analytic floors, compiler estimates)."""
        return {}

    def notes(self) -> dict[str, object]:
        """What the strategy really did here, for the record."""
        return {}


class Backend(ABC):
    name: str

    def env_vars(self, strategy: Strategy, device: str) -> dict[str, str]:
        """Environment to set before the framework is imported."""
        return {}

    @abstractmethod
    def environment(self) -> dict[str, object]:
        """Framework version, device name and settings, read after import."""

    @abstractmethod
    def build(self, spec: BuildSpec) -> Session:
        """Build model, optimizer and synthetic batch; raise Unsupported with a reason."""

    def is_oom(self, exc: BaseException) -> bool:
        """Whether an exception is the framework's out-of-memory."""
        return isinstance(exc, MemoryError)


# How each framework gets its GPU, named in the reason of every cell the device guard stops.
GPU_FIXES = {
    "torch": "install a CUDA build of torch (requirements/gpu.txt; the CPU file's torch is the "
    "CPU build) or use a GPU image's own torch (scripts/install_offline.sh)",
    "jax": "install jax with its CUDA plugin (jax[cuda13] in requirements/gpu.txt) or use a GPU "
    "image's jax; JAX_PLATFORMS=cuda is set on GPU hosts so that a plugin that fails to start "
    "is never replaced by the CPU",
    "jittor": "Jittor compiles its CUDA build at first import with the nvcc it finds "
    "(nvcc_path) and loads cuDNN 8 beside it; run `python -m membench.backends.jittor_backend` "
    "with Jittor's interpreter (MEMBENCH_PYTHON_JITTOR) to see that build's log",
}


def checked_environment(backend: Backend, preset: Preset, host_device: str) -> dict[str, object]:
    """backend.environment(), refused with DeviceMismatch where the cell is meant for the GPU
    (a GPU preset, or an NVIDIA GPU on this host) and the framework runs anywhere else."""
    wanted = f"preset {preset.name} is a GPU preset" if preset.gpu else ""
    if host_device == "cuda":
        wanted = wanted or "this host has an NVIDIA GPU"
    try:
        env = backend.environment()
    except Exception as exc:
        if not wanted:
            raise
        cause = f"{type(exc).__name__}: {exc}"
        raise DeviceMismatch(_gpu_reason(backend.name, wanted, "failed to start", cause)) from exc
    device = env.get("device")
    if wanted and device != "cuda":
        found = f"runs on {device} ({backend.name} {env.get('framework_version', '?')})"
        raise DeviceMismatch(_gpu_reason(backend.name, wanted, found))
    return env


def _gpu_reason(framework: str, wanted: str, found: str, cause: str = "") -> str:
    fix = GPU_FIXES.get(framework, "install its GPU build")
    # the fix first: a long cause must not push it out of a truncated reason
    text = f"not on the GPU: {wanted}, but {framework} {found}. Fix: {fix}"
    return f"{text}. Cause: {cause[:1000]}" if cause else text
