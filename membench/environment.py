"""Where a measurement ran: machine, device, versions, settings. Framework-free."""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from membench.instruments.probes import nvml_device_info
from membench.paths import REPO_ROOT

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


def relevant_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's variables a record keeps, with extra's on top (what a worker launched
    now is given: its record names them)."""
    return {
        k: v
        for k, v in sorted({**os.environ, **(extra or {})}.items())
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
        # In a session of its own: a worker's whole-life peak adds its process group's other
        # processes, and git's 2-6 MiB, met by the watch in 8 of 72 torch calibration cells,
        # is the suite's bookkeeping, not the framework's memory.
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True,
            start_new_session=True,
        ).stdout.strip()  # fmt: skip

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


# The ISA extensions that decide which kernels a framework's CPU backend picks (oneDNN, XLA,
# Eigen): a record keeps those of its host that are present, in this order.
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16")


def parse_cpuinfo(text: str) -> dict[str, object]:
    """The facts of the first processor in a /proc/cpuinfo text that decide a host's kernels:
    cpu_vendor, cpu_family and cpu_model_number (where the file has them: x86) and cpu_isa
    (the ISA_FLAGS present, a list; empty where none, absent where the file lists no flags
    or features)."""
    facts: dict[str, object] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "vendor_id":
            facts["cpu_vendor"] = value
        elif key == "cpu family" and value.isdigit():
            facts["cpu_family"] = int(value)
        elif key == "model" and value.isdigit():
            facts["cpu_model_number"] = int(value)
        elif key in ("flags", "Features"):  # x86's flags, Arm's features
            present = set(value.split())
            # a list, as JSON gives it back: a record read from its store equals the one written
            facts["cpu_isa"] = [flag for flag in ISA_FLAGS if flag in present]
    return facts


@cache
def cpu_facts() -> dict[str, object]:
    """This host's parse_cpuinfo (nothing where /proc/cpuinfo cannot be read)."""
    try:
        return parse_cpuinfo(Path("/proc/cpuinfo").read_text())
    except OSError:
        return {}


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
    from membench import settings

    if given := settings.value("MEMBENCH_PRESET"):
        return str(given)
    return "gpu" if detected_device() == "cuda" else "cpu-quick"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def cpu_label(cpu: str) -> str:
    """A CPU model name as a name's first part: trademarks, clock and filler words dropped
    ("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz" -> intel-xeon-platinum-8375c)."""
    text = re.sub(r"\((?:R|TM|C)\)", " ", cpu, flags=re.I).split("@", 1)[0]
    text = re.sub(r"\b(?:CPU|Processor|\d+-Core)\b", " ", text, flags=re.I)
    return _slug(text) or "cpu"


def isa_level(flags: Iterable[str]) -> str:
    """The best ISA level among a host's flags: amx > avx512bf16 > avx512 > avx2 > other."""
    present = set(flags)
    if present & {"amx_tile", "amx_bf16"}:
        return "amx"
    if "avx512_bf16" in present:
        return "avx512bf16"
    if "avx512f" in present:
        return "avx512"
    return "avx2" if "avx2" in present else "other"


def machine_for(facts: Mapping[str, object]) -> str:
    """The machine name of a host from its facts (host_environment's keys, or a record's
    environment): the host kind, so that one name never stands for hosts whose speeds do
    not compare. A CPU host: CPU label, family and model, ISA level, cores and memory
    (amd-epyc-f26m2-avx512bf16-2core-24gib); facts a record lacks (those measured before
    the CPU's numbers and flags were kept) are left out of its name (amd-epyc-2core-24gib:
    a label, not a host kind). A GPU host: the GPU, their count and the cores."""
    cores = int(str(facts.get("cpu_count") or 0))
    if facts.get("gpu_name"):
        return f"{_slug(str(facts['gpu_name']))}-x{facts.get('gpu_count', 1)}-{cores}core"
    parts = [cpu_label(str(facts.get("cpu") or ""))]
    if "cpu_family" in facts and "cpu_model_number" in facts:
        parts.append(f"f{facts['cpu_family']}m{facts['cpu_model_number']}")
    isa = facts.get("cpu_isa")
    if isinstance(isa, (list, tuple)):
        parts.append(isa_level(isa))
    ram_gib = round(int(str(facts.get("host_memory_bytes") or 0)) / 2**30)
    return "-".join([*parts, f"{cores}core", f"{ram_gib}gib"])


def machine_name() -> str:
    """A name that says what the machine is: MEMBENCH_MACHINE, else this host's kind
    (machine_for); either follows the one rule of machine names (argtypes.machine)."""
    from membench import argtypes, settings

    if given := settings.value("MEMBENCH_MACHINE"):
        return str(given)
    facts = {
        "cpu": cpu_model(),
        **cpu_facts(),
        "cpu_count": os.cpu_count() or 0,
        "host_memory_bytes": host_memory_bytes(),
        **(gpu_info() or {}),
    }
    try:
        return argtypes.machine(machine_for(facts))
    except argparse.ArgumentTypeError as exc:
        raise settings.SettingError(f"this host's name, {exc}; set MEMBENCH_MACHINE") from None


# platform.platform()'s architectures, found among its parts by stable_os
ARCHES = ("x86_64", "amd64", "aarch64", "arm64", "i386", "i686", "ppc64le", "s390x", "riscv64")


def stable_os(platform_string: str) -> str:
    """A platform string without what varies between hosts of one kind (the kernel's build):
    "Linux-6.18.44-fc-v657-x86_64-with-glibc2.36" -> "Linux x86_64 glibc2.36". The system,
    the architecture and the C library stay; a string without dashes is returned as it is."""
    head, _, libc = platform_string.partition("-with-")
    system, *rest = head.split("-")
    arch = next((part for part in reversed(rest) if part.lower() in ARCHES), "")
    return " ".join(part for part in (system, arch, libc.replace("-", " ")) if part)


def asv_machine_fields(host: Mapping[str, object]) -> dict[str, str]:
    """asv's description of the machine a host (host_environment, or a record's environment)
    belongs to, stable fields only, so that machine.json and each result's params are the
    same on every host of one kind: os (stable_os), arch, cpu (with the GPUs), num_cpu, ram."""
    platform_string = str(host.get("platform") or "")
    arch = str(host.get("arch") or "") or next(
        (p for p in platform_string.split("-") if p.lower() in ARCHES), platform.machine()
    )
    gpu = f", {host['gpu_name']} x{host['gpu_count']}" if "gpu_name" in host else ""
    return {
        "arch": arch,
        "cpu": f"{host.get('cpu', '')}{gpu}",
        "num_cpu": str(host.get("cpu_count")),
        "os": stable_os(platform_string),
        "ram": f"{round(int(str(host.get('host_memory_bytes') or 0)) / 2**30)}GB",
    }


def host_environment(extra_env: Mapping[str, str] | None = None) -> dict[str, object]:
    """Everything about the host that a record should carry, framework-free; extra_env: the
    variables a worker of the run is launched with, for a record written without one."""
    env: dict[str, object] = {
        "machine": machine_name(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,  # frameworks may run under interpreters of their own
        "platform": platform.platform(),
        "arch": platform.machine(),
        "cpu": cpu_model(),
        **cpu_facts(),  # vendor, family, model and ISA flags: what decides the kernels
        "cpu_count": os.cpu_count(),
        "host_memory_bytes": host_memory_bytes(),
        "libraries": library_versions(),
        "env": relevant_env(extra_env),
        "git": git_commit(),
    }
    gpu = gpu_info()
    if gpu:
        env.update(gpu)
    return env
