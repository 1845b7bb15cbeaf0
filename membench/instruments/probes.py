"""Framework-free memory probes: host peak RSS and an NVML sampler for GPUs."""

from __future__ import annotations

import ctypes
import gc
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in {_STATUS}")


def current_rss_bytes() -> int:
    return _status_kib("VmRSS") * 1024


def peak_rss_bytes() -> int:
    """The kernel's high-water mark of this process's resident set (VmHWM)."""
    return _status_kib("VmHWM") * 1024


def release_freed_memory() -> None:
    """Collect garbage and hand freed heap pages back, so they stop counting as resident."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


@dataclass
class HostPeak:
    baseline_bytes: int  # RSS right after the reset
    peak_bytes: int  # VmHWM since the reset

    @property
    def delta_bytes(self) -> int:
        return self.peak_bytes - self.baseline_bytes


class HostPeakProbe:
    """Peak host RSS over a phase, by resetting the kernel's VmHWM (Linux >= 4.0).

    Freed heap stays resident until trimmed, so reset() collects and trims first and takes
    the baseline after the reset: otherwise a saving shows as ~0 or negative. Each reset
    first keeps the mark it erases, so life_peak() is the process's whole-life VmHWM (what
    a memory limit meets: start-up, build and compilation included).
    """

    def __init__(self) -> None:
        self._baseline: int | None = None
        self._erased = 0  # the highest VmHWM a reset erased

    @staticmethod
    def supported() -> bool:
        return _CLEAR_REFS.exists() and _STATUS.exists()

    def reset(self) -> int:
        self._erased = max(self._erased, peak_rss_bytes())
        release_freed_memory()
        # "5" resets the peak RSS (VmHWM) to the current RSS.
        _CLEAR_REFS.write_text("5")
        self._baseline = current_rss_bytes()
        return self._baseline

    def read(self) -> HostPeak:
        if self._baseline is None:
            raise RuntimeError("HostPeakProbe.read() before reset()")
        return HostPeak(self._baseline, peak_rss_bytes())

    def life_peak(self) -> int:
        """VmHWM over the process's whole life so far, resets notwithstanding."""
        return max(self._erased, peak_rss_bytes())


# The sampler's period. NVML's per-process figure moves only when the framework's allocator
# asks the driver for memory (caching allocators keep what they got), so 20 ms misses little;
# a 5 ms thread cost a 2-core host's ResNet-50 step more than the 1% the suite allows its
# probes (`membench selfcheck` measures it per framework).
SAMPLE_INTERVAL_SECONDS = 0.02


class PeakSampler:
    """Samples a reading function in a thread and keeps the maximum.

    Sampling is a lower bound on short spikes; the interval bounds what it can miss.
    The reading function is injected so the logic is testable without a GPU.
    """

    def __init__(
        self, read: Callable[[], int | None], interval_seconds: float = SAMPLE_INTERVAL_SECONDS
    ):
        self._read = read
        self._interval = interval_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.peak: int | None = None
        self.samples = 0
        self.errors = 0

    def _sample(self) -> None:
        try:
            value = self._read()
        except Exception:  # a failed reading is counted, never fatal to the measurement
            self.errors += 1
            return
        self.samples += 1
        if value is not None and (self.peak is None or value > self.peak):
            self.peak = value

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self._interval)

    def __enter__(self) -> PeakSampler:
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="peak-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()


PROCESS = "process"
DEVICE_MINUS_BASELINE = "device-minus-baseline"


class NvmlReader:
    """GPU memory used by this process according to NVML (driver level, includes the
    CUDA context and library workspaces).

    In containers NVML may not list our PID, list it with 0 bytes, or fail to list processes;
    then the reading falls back to device-wide used memory minus the baseline taken at
    construction. Each reading's method is counted, and the peak's method kept.
    """

    def __init__(self, device_index: int | None = None, pid: int | None = None, nvml=None):
        if nvml is None:
            import pynvml as nvml
        self._nvml = nvml
        nvml.nvmlInit()
        if device_index is None:
            device_index = visible_gpu_index(nvml)
        if device_index is None:
            raise RuntimeError("CUDA_VISIBLE_DEVICES hides every GPU from this process")
        self._handle = nvml.nvmlDeviceGetHandleByIndex(device_index)
        self._pid = os.getpid() if pid is None else pid
        self._device_baseline = self.device_used()
        self.method = PROCESS  # the last reading's
        self.methods: Counter[str] = Counter()
        self.peak: int | None = None
        self.peak_method = ""
        self.process_error = ""  # the last failure to list processes, for the record

    def device_used(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def process_used(self) -> int | None:
        """Our process's bytes, or None where NVML cannot tell (0 bytes means the same: a
        process that holds a CUDA context uses hundreds of MB)."""
        try:
            processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        except Exception as exc:  # NVMLError_NotSupported, ... in some containers
            self.process_error = f"{type(exc).__name__}: {exc}"
            return None
        for proc in processes:
            if proc.pid == self._pid and proc.usedGpuMemory:
                return int(proc.usedGpuMemory)
        return None

    def __call__(self) -> int:
        used = self.process_used()
        if used is not None:
            self.method = PROCESS
        else:
            self.method = DEVICE_MINUS_BASELINE
            used = max(0, self.device_used() - self._device_baseline)
        self.methods[self.method] += 1
        if self.peak is None or used > self.peak:
            self.peak, self.peak_method = used, self.method
        return used


def visible_gpu_index(nvml) -> int | None:
    """NVML's index of the first GPU that CUDA_VISIBLE_DEVICES shows this process (0 where
    it is unset), None where it hides them all. NVML ignores the variable, but Ray and other
    schedulers hand each process its GPU through it, so the probes must follow it."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return 0
    first = raw.split(",")[0].strip()
    if not first or first.startswith("-"):
        return None
    if first.isdigit():
        return int(first)
    return int(nvml.nvmlDeviceGetIndex(nvml.nvmlDeviceGetHandleByUUID(first)))  # GPU-<uuid>


def nvml_device_info(nvml=None) -> dict[str, object] | None:
    """Name, memory, index and UUID of the GPU this process uses (see visible_gpu_index),
    the machine's GPU count and driver, or None where NVML shows this process no device."""
    try:
        if nvml is None:
            import pynvml as nvml

        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
        index = visible_gpu_index(nvml)
        if count == 0 or index is None:
            return None
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        return {
            "gpu_name": _text(nvml.nvmlDeviceGetName(handle)),
            "gpu_count": int(count),
            "gpu_index": index,
            "gpu_uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
            "gpu_memory_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
        }
    except Exception:  # no library, no driver, no device: all mean "no GPU here"
        return None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ForeignCpuProbe:
    """Share of the host's CPU time that other processes used while a cell was measured.

    Throughput is only comparable between runs on an otherwise idle host: the record keeps
    this share so that comparisons can discount speed measured beside other work. Busy time
    counts the hypervisor's steal as well. The cell's own processes are its worker's process
    group (the runner starts each cell in a group of its own): a rank's peers are the cell,
    not foreign work."""

    def __init__(self, sample: Callable[[], tuple[float, float, float]] | None = None):
        self._sample = sample or _cpu_times
        self._start = self._sample()

    def read(self) -> float:
        (t0, busy0, own0), (t1, busy1, own1) = self._start, self._sample()
        capacity = (t1 - t0) * (os.cpu_count() or 1)
        if capacity <= 0:
            return 0.0
        return min(1.0, max(0.0, ((busy1 - busy0) - (own1 - own0)) / capacity))


def _cpu_times() -> tuple[float, float, float]:
    """(wall clock, the host's busy CPU seconds, this process's and its children's)."""
    import psutil

    system = psutil.cpu_times()
    busy = sum(
        getattr(system, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal")
    )
    return time.perf_counter(), busy, _group_cpu_seconds(psutil)


def _group_cpu_seconds(psutil) -> float:
    """CPU seconds of every process in this process's group, their reaped children's too."""
    group, total = os.getpgid(0), 0.0
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) != group:
                continue
            t = proc.cpu_times()
        except (ProcessLookupError, psutil.Error):  # gone meanwhile
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total
