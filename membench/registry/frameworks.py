"""The frameworks: each declared once, with everything the harness needs to know of it."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from membench.registry.names import lookup

# What the harness assumes of a framework it has no declaration for (a record of an unknown one)
DEFAULT_CPU_CELL_SECONDS = 40.0
DEFAULT_GPU_FIX = "install its GPU build"
# The short CPU presets' lists of cells they leave out (membench.registry.presets): smoke's;
# cpu-quick's, which cpu-capacity, calibrate and releases leave out too; releases' own.
SHORT_CPU_LISTS = ("smoke", "quick", "releases")


@dataclass(frozen=True)
class SlowOnCpu:
    """Cells of a framework too slow on two CPU cores for the short CPU presets, and why:
    `within` names the lists that leave them out (SHORT_CPU_LISTS); an empty workloads or
    strategies matches every one."""

    within: tuple[str, ...]
    workloads: tuple[str, ...]
    strategies: tuple[str, ...]
    reason: str

    def __post_init__(self) -> None:
        if unknown := set(self.within) - set(SHORT_CPU_LISTS):  # a typo would drop the rule
            raise ValueError(f"unknown short CPU lists {sorted(unknown)}; valid: {SHORT_CPU_LISTS}")


@dataclass(frozen=True)
class Framework:
    """Everything the harness knows of a framework, declared once (register_framework); its
    backend declares what it runs, its model modules are found by their file names."""

    name: str
    description: str
    backend: str  # "module:Class", imported lazily (load_backend)
    distribution: str  # pip distribution name, to test availability without importing
    # distributions whose versions every record keeps (the framework's own stack)
    libraries: tuple[str, ...] = ()
    model_stem: str = ""  # models/<workload>/<stem>_impl.py (default: the framework's name)
    reference_loop: str = ""  # selfcheck's plain loop (a module), "" where it has none
    # a fresh CPU worker's start, build and compile on two cores (the estimate's prior)
    cpu_cell_seconds: float = DEFAULT_CPU_CELL_SECONDS
    # a fresh GPU worker's fixed cost (import, CUDA context, build, first step): gpu_session.py
    gpu_cell_seconds: float = 30.0
    # on top of it, the GPU plans' other costs: a compile strategy's cell compiling from an
    # empty cache (each such cell), and a workload's first cell of a session compiling the
    # kernels the framework's cache then keeps (once per workload)
    gpu_compile_seconds: float = 0.0
    gpu_first_cell_seconds: float = 0.0
    # whether its first step times convolution kernels to choose them (gpu_session's
    # AUTOTUNE_STEPS); a compiler that autotunes does it in the fixed cost
    gpu_autotunes: bool = False
    # how to get its GPU build, named in the reason of every cell the device guard stops
    gpu_fix: str = DEFAULT_GPU_FIX
    # strategies whose first step reads a compile cache the framework keeps on disk between
    # processes ("*": every strategy): a sweep warms it first, so that every release's first
    # step meets a warm cache
    disk_compile_cache: tuple[str, ...] = ()
    # cells too slow on two CPU cores for the short CPU presets, which leave them out
    slow_on_cpu: tuple[SlowOnCpu, ...] = ()
    # a module whose run (`python -m`) compiles the framework's core, once per environment: a
    # release's environment runs it at its setup (membench versions), "" where there is none;
    # and that compile's seconds in a GPU node's setup (gpu_session.SETUP_SECONDS)
    core_build: str = ""
    core_build_gpu_seconds: float = 0.0

    def caches_compiles(self, strategy: str) -> bool:
        return "*" in self.disk_compile_cache or strategy in self.disk_compile_cache

    @property
    def stem(self) -> str:
        return self.model_stem or self.name


FRAMEWORKS: dict[str, Framework] = {}


def register_framework(framework: Framework) -> None:
    if not isinstance(framework, Framework):  # a plugin's mistake, named at its import
        raise TypeError(f"register_framework takes a Framework, got {framework!r}")
    FRAMEWORKS[framework.name] = framework


# CPU priors: the median cell of the committed cpu-preset runs on two cores. GPU costs: torch's
# and JAX's from the first GPU session (H200: a torch worker's start and build 7-10 s, JAX's
# 36-38 s with XLA's compile of the step, torch.compile's first cell 33 s over eager, GPT-2
# small); Jittor's still a guess (its CUDA build has not run yet; docs/gpu.md).
register_framework(
    Framework(
        "torch", "PyTorch", "membench.backends.torch_backend:TorchBackend", "torch",
        libraries=("torch",), reference_loop="models.reference.torch_loop",
        cpu_cell_seconds=25.0, gpu_cell_seconds=8.0,
        gpu_compile_seconds=35.0,  # torch.compile from an empty Inductor cache
        gpu_autotunes=True,  # cudnn.benchmark
        disk_compile_cache=("compile",),  # Inductor's cache, /tmp/torchinductor_<user>
        gpu_fix="install a CUDA build of torch (requirements/gpu.txt; the CPU file's torch is "
        "the CPU build) or use a GPU image's own torch (scripts/install_offline.sh)",
    )
)  # fmt: skip
register_framework(
    Framework(
        "jax", "JAX/Flax", "membench.backends.jax_backend:JaxBackend", "jax",
        libraries=("jax", "jaxlib", "flax", "optax"), model_stem="flax",
        reference_loop="models.reference.flax_loop", cpu_cell_seconds=45.0, gpu_cell_seconds=38.0,
        gpu_fix="install jax with its CUDA plugin (jax[cuda13] in requirements/gpu.txt) or use "
        "a GPU image's jax; JAX_PLATFORMS=cuda is set on GPU hosts so that a plugin that fails "
        "to start is never replaced by the CPU",
    )
)  # fmt: skip
JITTOR_UNET_SLOW = (
    "Jittor's 3D convolutions run generic kernels on CPUs: 33 s a training step at 16^3 and "
    "batch 2 on two cores (minutes a cell, and a capacity search needs several); at 8^3 its "
    "convolution refuses the 1^3 bottom level (size of var should be larger than kernel_size)"
)
# from the committed cpu runs' cell times
JITTOR_SLOW_ON_CPU = (
    SlowOnCpu(
        ("smoke",), ("unet3d",), (),
        "Jittor's 3D convolutions run generic kernels on CPUs (90-330 s a cell at 16^3)",
    ),
    SlowOnCpu(
        ("smoke",), (), ("amp-bf16", "amp-fp16", "infer-half", "fused-attention-bf16"),
        "Jittor compiles a float16/bfloat16 CPU kernel per op on first use (80-600 s a cell)",
    ),
    SlowOnCpu(
        ("smoke",), ("resnet50",), ("no-fuse",),
        "unfused convolutions materialise their im2col-like tensors (40-80 s a cell at 64x64)",
    ),
    SlowOnCpu(
        ("quick",), (), ("amp-bf16",),
        "Jittor compiles a bfloat16 CPU kernel per op on first use (80-600 s a cell)",
    ),
    SlowOnCpu(("quick",), ("unet3d",), (), JITTOR_UNET_SLOW),
    SlowOnCpu(
        ("releases",), (), ("infer-half",),
        "Jittor compiles a float16 CPU kernel per op on first use (80-600 s a cell)",
    ),
)  # fmt: skip
register_framework(
    Framework(
        "jittor", "Jittor", "membench.backends.jittor_backend:JittorBackend", "jittor",
        libraries=("jittor",), reference_loop="models.reference.jittor_loop",
        cpu_cell_seconds=40.0, gpu_cell_seconds=20.0,
        gpu_first_cell_seconds=90.0,  # nvcc compiling a workload's kernels (its cache keeps them)
        disk_compile_cache=("*",),  # every kernel, compiled once into ~/.cache/jittor
        slow_on_cpu=JITTOR_SLOW_ON_CPU,
        # its core, compiled at first import, once per environment (minutes); on a GPU node
        # with nvcc: the CPU core took 90 s on 2 cores here, the CUDA files' nvcc a guess
        core_build="membench.backends.jittor_backend", core_build_gpu_seconds=100.0,
        gpu_fix="Jittor compiles its CUDA build at first import with the nvcc it finds "
        "(nvcc_path) and loads cuDNN 8 beside it; run `python -m "
        "membench.backends.jittor_backend` with Jittor's interpreter (MEMBENCH_PYTHON_JITTOR) "
        "to see that build's log",
    )
)  # fmt: skip


def framework(name: str) -> Framework:
    return lookup(FRAMEWORKS, "framework", name)


def load_backend(name: str):
    """Import and instantiate a framework's backend (the only place a backend is imported):
    the worker steps it; the parent reads its declarations, without the framework."""
    module_name, _, class_name = framework(name).backend.partition(":")
    return getattr(importlib.import_module(module_name), class_name)()


def framework_installed(name: str) -> bool:
    """Whether the framework's distribution is installed for the interpreter that runs its
    workers (membench.interpreters), without importing it."""
    import sys
    from importlib.metadata import PackageNotFoundError, version

    from membench.interpreters import InterpreterError, distribution_installed, framework_python

    try:
        python = framework_python(name)
    except InterpreterError:
        return False
    if python != sys.executable:
        return distribution_installed(python, framework(name).distribution)
    try:
        version(framework(name).distribution)
    except PackageNotFoundError:
        return False
    return True
