"""Where a measurement ran: machine, device, versions, settings. Framework-free."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from membench.paths import REPO_ROOT
from membench.probes import nvml_device_info

# Settings that change what a framework allocates or how fast it runs.
RELEVANT_ENV_PREFIXES = (
    "PYTORCH_",
    "XLA_",
    "JAX_",
    "CUDA_",
    "OMP_",
    "MKL_",
    "JT_",
    "NCCL_",
    "MEMBENCH_",
)
RELEVANT_ENV_NAMES = (
    "use_cutt",
    "use_cutlass",
    "use_mkl",
    "nvcc_path",
    "FIX_TORCH_ERROR",
    "LD_LIBRARY_PATH",
    "MALLOC_ARENA_MAX",
)
CODE_PATHS = ("membench", "models", "benchmarks", "requirements", "pyproject.toml")


def libraries() -> tuple[str, ...]:
    """The distributions whose versions a record keeps: numpy, each registered framework's
    stack, asv and NVML's bindings."""
    from membench.registry import FRAMEWORKS, load_plugins

    load_plugins()
    stacks = [name for f in FRAMEWORKS.values() for name in f.libraries]
    return ("numpy", *stacks, "asv", "nvidia-ml-py")


def relevant_env() -> dict[str, str]:
    return {
        k: v
        for k, v in sorted(os.environ.items())
        if k.startswith(RELEVANT_ENV_PREFIXES) or k in RELEVANT_ENV_NAMES
    }


def library_versions() -> dict[str, str]:
    found = {}
    for name in libraries():
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return found


@cache
def git_commit() -> dict[str, object]:
    # Inside an environment asv built, the suite is an installed wheel of the commit asv
    # checked out, which asv names.
    if os.environ.get("ASV_COMMIT"):
        return {"commit": os.environ["ASV_COMMIT"], "dirty": False}

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        # Only what can change a measurement counts: an edited README is not a dirty run.
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS))
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "dirty": None}
    return {"commit": commit, "dirty": dirty}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_memory_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


@cache
def gpu_info() -> dict[str, object] | None:
    return nvml_device_info()


def detected_device() -> str:
    """'cuda' when NVML sees an NVIDIA GPU, else 'cpu' (no framework imported)."""
    return "cuda" if gpu_info() else "cpu"


def default_preset() -> str:
    """MEMBENCH_PRESET if set, else the preset that fits the detected device."""
    if os.environ.get("MEMBENCH_PRESET"):
        return os.environ["MEMBENCH_PRESET"]
    return "gpu" if detected_device() == "cuda" else "cpu-quick"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def machine_name() -> str:
    """A name that says what the machine is: MEMBENCH_MACHINE, else built from the hardware."""
    if os.environ.get("MEMBENCH_MACHINE"):
        return _slug(os.environ["MEMBENCH_MACHINE"])
    gpu = gpu_info()
    cores = os.cpu_count() or 0
    ram_gib = round(host_memory_bytes() / 2**30)
    if gpu:
        return f"{_slug(str(gpu['gpu_name']))}-x{gpu['gpu_count']}-{cores}core"
    return f"cpu-{platform.machine()}-{cores}core-{ram_gib}gib"


def host_environment() -> dict[str, object]:
    """Everything about the host that a record should carry, framework-free."""
    env: dict[str, object] = {
        "machine": machine_name(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,  # frameworks may run under interpreters of their own
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "host_memory_bytes": host_memory_bytes(),
        "libraries": library_versions(),
        "env": relevant_env(),
        "git": git_commit(),
    }
    gpu = gpu_info()
    if gpu:
        env.update(gpu)
    return env
