import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from membench.instruments.probes import HostPeakProbe, NvmlReader, PeakSampler

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


def test_foreign_cpu_share_is_the_host_busy_time_less_this_process_over_the_capacity():
    import os

    from membench.instruments.probes import ForeignCpuProbe

    cores = os.cpu_count() or 1
    # 2 s of wall time; the host was busy 1.5 core-seconds, 0.5 of them ours
    samples = iter([(10.0, 100.0, 20.0), (12.0, 101.5, 20.5)])
    assert ForeignCpuProbe(lambda: next(samples)).read() == 1.0 / (2 * cores)
    samples = iter([(0.0, 5.0, 5.0), (1.0, 5.5, 5.5)])  # all the work was ours
    assert ForeignCpuProbe(lambda: next(samples)).read() == 0.0


# The pytest workers share one process group: while the other worker reaps a child that ran in a
# group of its own (a cell), that child's whole CPU time lands in the group's own time at once
# and can cancel the spinner's share (CI once read 0.0 here).
@pytest.mark.quiet_host
def test_foreign_cpu_probe_sees_another_process_working():
    import os
    import shlex
    import subprocess
    import sys
    import time

    from membench.instruments.probes import ForeignCpuProbe

    probe = ForeignCpuProbe()
    spin = "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"
    # started by a shell that exits at once, in a session of its own: not ours
    script = f"{shlex.quote(sys.executable)} -c {shlex.quote(spin)} >/dev/null 2>&1 &"
    subprocess.run(["sh", "-c", script], check=True, start_new_session=True)
    time.sleep(1.8)  # without working ourselves
    # other work on the host can only add to the share: the spinner alone is a lower bound
    assert probe.read() >= 0.5 / (os.cpu_count() or 1)


@pytest.mark.quiet_host  # another pytest worker's work would be foreign: the share it bounds
def test_a_peer_in_the_cells_process_group_is_not_foreign():
    # A cell of W ranks is one process group: a rank's peers working is the cell working.
    import os
    import subprocess
    import sys
    import time

    from membench.instruments.probes import ForeignCpuProbe

    spin = "import time\nt = time.time()\nwhile time.time() - t < 3: pass"
    peer = subprocess.Popen([sys.executable, "-c", spin])  # in our process group
    try:
        time.sleep(0.3)  # the peer is running
        probe = ForeignCpuProbe()
        time.sleep(1.5)
        # counted as foreign, the spinner alone would be ~1/cores; the bound leaves room for
        # the host's own noise (a full run here once read 0.253 of 2 cores beside it)
        assert probe.read() < 0.8 / (os.cpu_count() or 1)
    finally:
        peer.wait()
