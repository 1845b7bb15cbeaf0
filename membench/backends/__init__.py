"""The backend contract: what each framework must provide to the worker.

Backend modules import their framework inside methods only, so that the worker can set
environment variables (allocator knobs, XLA/Jittor flags) before the first import.
"""

from __future__ import annotations

import importlib
import os
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from membench.backends.declarations import ANY as ANY
from membench.backends.declarations import DEVICES as DEVICES
from membench.backends.declarations import BuildSpec as BuildSpec
from membench.backends.declarations import Implemented as Implemented
from membench.backends.declarations import Support as Support
from membench.backends.declarations import Unsupported as Unsupported
from membench.backends.readings import Readings as Readings  # for the backends
from membench.backends.session import Session
from membench.environment import detected_device
from membench.instruments.host_malloc import (
    FIXED_MMAP_THRESHOLD_BYTES,
    HostMallocUnavailable,
    fix_mmap_threshold,
    mmap_threshold,
)
from membench.records import ProbeBudget
from membench.registry import Preset, Strategy, knob_defaults, workload


class DeviceMismatch(RuntimeError):
    """A cell meant for the GPU whose framework would run elsewhere: the cell ends `error`."""


def device_budget_fraction() -> float | None:
    """The share of the device's memory a capacity probe may use (its ProbeBudget, which
    membench capacity gives the worker); each backend imposes it with its own limit."""
    budget = ProbeBudget.of_env()
    return budget.device_fraction if budget else None


# -- the float32 arithmetic policy --------------------------------------------------------------
TF32_ELSEWHERE = (
    "TF32 is a tensor-core format of NVIDIA GPUs (Ampere and later); CPUs compute float32 in full"
)


def tf32_override(strategy: Strategy, device: str) -> dict[str, str]:
    """The library-level half of the fp32 policy: NVIDIA_TF32_OVERRIDE=0 keeps cuBLAS and cuDNN
    off TF32 whatever a framework asks (cuDNN's default math type allows TF32 on Ampere and
    later, and Jittor's convolutions leave it at the default: cudnn_conv_op.cc)."""
    if device == "cuda" and strategy.matmul == "fp32":
        return {"NVIDIA_TF32_OVERRIDE": "0"}
    return {}


def model_module(workload_name: str, framework: str) -> Any:
    """The workload's model module for a framework (models/<workload>/<framework>_impl.py)."""
    from membench.registry import framework as framework_entry

    modules = workload(workload_name).model_modules
    if framework not in modules:
        label = framework_entry(framework).description
        raise Unsupported(f"workload {workload_name} has no {label} model")
    return importlib.import_module(modules[framework])


def model_options(spec: BuildSpec) -> dict[str, object]:
    """The strategy's knobs that a workload's model takes besides checkpointing: the
    attention kind, for workloads with attention (others refuse the knob in workload_refusal)."""
    return {"attention": spec.strategy.attention} if workload(spec.workload).attention else {}


# -- declared support (the words in membench.backends.declarations) ---------------------------
# The host allocator strategy, one call under every framework (set_up_process makes it).
FIXED_MMAP_THRESHOLD = Implemented(
    f"glibc mallopt(M_MMAP_THRESHOLD, {FIXED_MMAP_THRESHOLD_BYTES >> 20} MiB) in the worker "
    "before the import: larger blocks are mapped, and unmapped when freed",
    ("cpu",),
    "glibc's threshold shapes host memory; a GPU's budget is its device memory",
)


def micro_batches(inputs: Any, labels: Any, k: int) -> list[tuple[Any, Any]]:
    """The batch as k equal (inputs, labels) micro-batches, in order (k=1: the batch)."""
    m = len(inputs) // k
    return [(inputs[i * m : (i + 1) * m], labels[i * m : (i + 1) * m]) for i in range(k)]


def workload_refusal(spec: BuildSpec) -> str | None:
    """What no framework can run for this workload and batch, whatever its backend."""
    s = spec.strategy
    if s.attention != "plain" and not workload(spec.workload).attention:
        return f"{spec.workload} has no attention layer for the knob to change"
    if s.memory_format != "contiguous" and not workload(spec.workload).convolution_dims:
        return f"{spec.workload} has no convolution whose layout the knob could change"
    if s.lengths != "fixed" and not workload(spec.workload).sequence:
        return f"{spec.workload} takes no sequence whose length could vary"
    if s.accumulate > 1 and spec.batch_size % s.accumulate:
        return f"batch {spec.batch_size} does not split into {s.accumulate} equal micro-batches"
    return cell_ranks_refusal(spec)


def cell_ranks_refusal(spec: BuildSpec) -> str | None:
    """Why a cell's ranks do not fit its strategy or batch (None: they do)."""
    s, w = spec.strategy, spec.world_size
    if w < 1:
        return f"world size {w}: a cell has at least one rank"
    if s.sharding == "none" and w > 1:
        return (
            f"world size {w} with strategy {s.name}, which does not shard: {w} ranks would be "
            f"{w} independent copies of one cell"
        )
    if s.sharding != "none" and w == 1:
        return (
            f"{s.name} spreads the step over ranks: it needs a world size above 1 "
            "(--world-size, or a preset with one such as cpu-shard)"
        )
    if spec.batch_size % w:
        return f"global batch {spec.batch_size} does not split evenly over {w} ranks"
    if s.accumulate > 1 and (spec.batch_size // w) % s.accumulate:
        per_rank = spec.batch_size // w
        return f"a rank's batch {per_rank} does not split into {s.accumulate} micro-batches"
    return None


class Backend(ABC):
    name: str
    # What each knob value runs as here, or why it is refused (see Support). Refusals are
    # decided from this table before the framework is imported, at plan time.
    support: ClassVar[Support] = {}
    # The baseline step, as this framework runs it (for the support matrix).
    baseline: ClassVar[str] = ""
    # A cell of W ranks: W worker processes started together (False), or one process that
    # drives W devices (True: JAX's single-controller model).
    one_process_drives_ranks: ClassVar[bool] = False
    # Whether its sessions build a workload's model module (model_module): a workload with no
    # module for this framework is then refused at plan time (a test double's step needs none).
    builds_model_modules: ClassVar[bool] = True

    @classmethod
    def unenforced_device_limit(cls, strategy: Strategy) -> str | None:
        """Why this framework's device limit does not stop a cell that exceeds a capacity
        budget (None: its limit makes the allocation fail, so out-of-memory is real)."""
        return None

    @classmethod
    def declared(cls, knob: str, value: object, default: object = None) -> Implemented | str:
        """The declaration for one knob value: Implemented, or the reason it is refused.
        The knob's default (the registry's unless given) is the baseline's value."""
        if value == (default if default is not None else knob_defaults().get(knob)):
            return Implemented(cls.baseline)
        values = cls.support.get(knob, {})
        if value in values:
            return values[value]
        if ANY in values:
            return values[ANY]
        return f"the {cls.name} backend does not implement {knob}={value!r}"

    @classmethod
    def strategy_refusal(cls, strategy: Strategy, device: str) -> str | None:
        """Why this backend refuses a strategy on a device (None: it runs it)."""
        defaults = knob_defaults(type(strategy))
        for knob, value in strategy.knobs().items():
            entry = cls.declared(knob, value, defaults[knob])
            if isinstance(entry, str):
                return entry
            if device not in entry.devices:
                return (
                    entry.elsewhere or f"{knob}={value!r} runs only on {', '.join(entry.devices)}"
                )
        return None

    @classmethod
    def model_refusal(cls, spec: BuildSpec) -> str | None:
        """Why the workload cannot be built here: it has no model module for this framework
        (models/<workload>/<stem>_impl.py; model_module would raise it at build time)."""
        if not cls.builds_model_modules or cls.name in workload(spec.workload).model_modules:
            return None
        from membench.registry import framework as framework_entry

        label = framework_entry(cls.name).description
        return f"workload {spec.workload} has no {label} model"

    def combination_refusal(self, spec: BuildSpec, device: str) -> str | None:
        """Why a combination of knobs that are each implemented is refused (None: runs)."""
        return None

    def refusal(self, spec: BuildSpec, device: str) -> str | None:
        """Why this cell cannot run here, decided without importing the framework."""
        return (
            workload_refusal(spec)
            or self.model_refusal(spec)
            or self.strategy_refusal(spec.strategy, device)
            or self.combination_refusal(spec, device)
        )

    def refusal_here(self, spec: BuildSpec) -> str | None:
        """Why this cell cannot run on this host's device: the one decision, asked at plan
        time (planning.declared_refusal), by the worker before the import, and by build."""
        return self.refusal(spec, detected_device())

    def env_vars(self, strategy: Strategy, device: str) -> dict[str, str]:
        """Environment to set before the framework is imported."""
        return {}

    def world_env_vars(self, world_size: int, device: str) -> dict[str, str]:
        """Environment a cell of world_size ranks needs before the import (one process
        driving W devices: the devices to make)."""
        return {}

    @abstractmethod
    def environment(self) -> dict[str, object]:
        """Framework version, device name and settings, read after import."""

    def build(self, spec: BuildSpec) -> Session:
        """The cell's Session; a cell the declarations refuse raises Unsupported first."""
        if reason := self.refusal_here(spec):
            raise Unsupported(reason)
        return self.create_session(spec)

    @abstractmethod
    def create_session(self, spec: BuildSpec) -> Session:
        """Build model, optimizer and synthetic batch (the cell is one the backend declares)."""

    def is_oom(self, exc: BaseException) -> bool:
        """Whether an exception is the framework's out-of-memory."""
        return isinstance(exc, MemoryError)

    @classmethod
    def compiled_memory_module(cls) -> str | None:
        """The module run as `python -m <module> '<cell JSON>' [--run-step]` that compiles a
        cell's step without running it and prints its compiled memory as one JSON line
        (membench.capacity.compiled_guess); None: this framework has no such compile."""
        return None

    # The module run as `python -m <module> '<request JSON>'` that predicts a cell's GPU memory
    # on a host without one, printing one JSON line (membench.gpu_predict); None: no such path.
    # Its environment: "default" (the suite's own) or "predict" (requirements/predict.txt, for
    # a framework whose GPU compiler comes only with its CUDA build).
    gpu_prediction_module: ClassVar[str | None] = None
    gpu_prediction_environment: ClassVar[str] = "default"


def set_up_process(backend: Backend, strategy: Strategy, world_size: int = 1) -> dict[str, object]:
    """Set this process up for the strategy before the framework is first imported: the
    backend's environment variables and the host allocator; returns what it set, as the
    record's environment entries."""
    env = backend.env_vars(strategy, detected_device())
    if world_size > 1:
        env.update(backend.world_env_vars(world_size, detected_device()))
    os.environ.update(env)
    done: dict[str, object] = {"env_set_by_strategy": env}
    if (threshold := mmap_threshold(strategy.allocator)) is not None:
        try:
            fix_mmap_threshold(threshold)
        except HostMallocUnavailable as exc:  # not glibc: the cell cannot run here
            raise Unsupported(str(exc)) from exc
        done["host_malloc_mmap_threshold_bytes"] = threshold
    return done


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
    from membench.registry.frameworks import DEFAULT_GPU_FIX, FRAMEWORKS

    known = FRAMEWORKS.get(framework)
    fix = known.gpu_fix if known else DEFAULT_GPU_FIX
    # the fix first: a long cause must not push it out of a truncated reason
    text = f"not on the GPU: {wanted}, but {framework} {found}. Fix: {fix}"
    return f"{text}. Cause: {cause[:1000]}" if cause else text
