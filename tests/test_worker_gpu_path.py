"""The worker's GPU branch, exercised on CPU with an injected NVML."""

import itertools
from types import SimpleNamespace

import pytest

from membench.backends import DeviceMismatch
from membench.instruments import probes
from membench.measure import worker
from membench.records import Cell
from tests.plugins.fake_framework import FakeBackend

from .test_probes import FakeNvml


class CudaFakeBackend(FakeBackend):
    def environment(self):
        return {**super().environment(), "device": "cuda"}


@pytest.fixture
def on_a_gpu_host(monkeypatch, fake_framework):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "count")
    monkeypatch.setattr(worker, "detected_device", lambda: "cuda")


def measure(backend):
    cell = Cell("fake-work", "fake", "baseline", 1, "smoke")
    return worker.measure(cell, backend, {})


def test_nvml_process_peak_is_recorded(on_a_gpu_host, monkeypatch):
    readings = itertools.chain([100, 300, 250], itertools.repeat(200))
    nvml = FakeNvml([], itertools.repeat(0))
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda handle: [
        SimpleNamespace(pid=probes.os.getpid(), usedGpuMemory=next(readings))
    ]
    monkeypatch.setattr(worker, "NvmlReader", lambda: probes.NvmlReader(nvml=nvml))
    record = measure(CudaFakeBackend())
    assert record.metrics["peak_device_process_bytes"] == 300
    assert record.environment["nvml_method"] == "process"
    assert record.environment["nvml_samples"] >= 2


def test_device_layer_is_missing_with_a_reason_when_nvml_fails(on_a_gpu_host, monkeypatch):
    def broken():
        raise OSError("NVML Shared Library Not Found")

    monkeypatch.setattr(worker, "NvmlReader", broken)
    record = measure(CudaFakeBackend())
    assert "peak_device_process_bytes" not in record.metrics
    assert "NVML Shared Library Not Found" in record.environment["nvml_unavailable"]
    assert record.metrics["peak_host_rss_bytes"] > 0  # the host layer still stands


def test_a_framework_running_on_the_cpu_of_a_gpu_host_is_stopped(on_a_gpu_host, monkeypatch):
    # e.g. a CPU-only jaxlib on a GPU machine: no CPU figure may enter a GPU table
    monkeypatch.setattr(
        worker, "NvmlReader", lambda: probes.NvmlReader(nvml=FakeNvml([], itertools.repeat(0)))
    )
    with pytest.raises(DeviceMismatch, match="this host has an NVIDIA GPU, but fake runs on cpu"):
        measure(FakeBackend())
