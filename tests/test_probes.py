import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from membench.probes import HostPeakProbe, NvmlReader, PeakSampler

MB200 = 200 * 2**20


@pytest.mark.skipif(not HostPeakProbe.supported(), reason="needs Linux /proc/self/clear_refs")
def test_host_probe_sees_a_known_allocation():
    probe = HostPeakProbe()
    probe.reset()
    block = np.ones(MB200 // 8)  # 200 MiB allocated and written: every page resident
    del block
    peak = probe.read()
    # The kernel's RSS counters are batched per CPU (up to tens of pages unfolded), so the
    # reading can be a few hundred KiB under 200 MiB; it must reach 200 MB (decimal).
    assert peak.delta_bytes >= 200e6


@pytest.mark.skipif(not HostPeakProbe.supported(), reason="needs Linux /proc/self/clear_refs")
def test_host_probe_reset_forgets_an_earlier_peak():
    probe = HostPeakProbe()
    probe.reset()
    block = np.ones(MB200 // 8)
    del block
    probe.reset()
    assert probe.read().delta_bytes < MB200 // 4


def test_host_probe_read_before_reset_is_an_error():
    with pytest.raises(RuntimeError):
        HostPeakProbe().read()


def test_sampler_keeps_the_maximum_and_counts_failures():
    values = iter([10, None, 50, 20])

    def read():
        value = next(values, 5)
        if value == 20:
            raise OSError("transient NVML failure")
        return value

    sampler = PeakSampler(read, interval_seconds=0.001)
    with sampler:
        while sampler.samples + sampler.errors < 8:
            pass
    assert sampler.peak == 50
    assert sampler.errors == 1


def test_sampler_with_no_reading_has_no_peak():
    with PeakSampler(lambda: None, interval_seconds=0.001) as sampler:
        pass
    assert sampler.peak is None
    assert sampler.samples >= 2


class FakeNvml:
    """pynvml's surface, with readings a test controls."""

    def __init__(self, processes, device_used):
        self.processes = processes
        self.device_used = device_used

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=next(self.device_used))

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self.processes


def test_nvml_reader_reads_this_process():
    procs = [SimpleNamespace(pid=1, usedGpuMemory=999), SimpleNamespace(pid=42, usedGpuMemory=700)]
    reader = NvmlReader(pid=42, nvml=FakeNvml(procs, itertools.repeat(5000)))
    assert reader() == 700
    assert reader.method == "process"


def test_nvml_reader_falls_back_to_device_minus_baseline():
    # in a container NVML may list no process with our pid
    reader = NvmlReader(pid=42, nvml=FakeNvml([], iter([1000, 1600])))
    assert reader() == 600
    assert reader.method == "device-minus-baseline"


def test_foreign_cpu_probe_sees_another_process_working_and_not_this_one():
    import os
    import subprocess
    import sys
    import time

    from membench.probes import ForeignCpuProbe

    probe = ForeignCpuProbe()
    spin = "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)  # a child: counted as ours
    own = probe.read()
    probe = ForeignCpuProbe()
    other = subprocess.Popen([sys.executable, "-c", spin], start_new_session=True)
    time.sleep(0.2)
    started = time.time()
    while other.poll() is None:  # wait without working ourselves
        time.sleep(0.05)
    foreign = probe.read()
    share_of_one_core = 1 / (os.cpu_count() or 1)
    assert foreign >= 0.5 * share_of_one_core, (foreign, time.time() - started)
    assert own < foreign
