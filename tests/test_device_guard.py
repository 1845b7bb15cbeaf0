"""The device guard: a cell meant for the GPU (a GPU preset, or a GPU host) whose framework
would run anywhere else ends `error` with a reason that names the fix. Shown here with the
CPU builds of all three frameworks, each a real worker."""

import pytest

from membench import registry
from membench.backends import DeviceMismatch, checked_environment
from membench.backends.jax_backend import JaxBackend
from membench.backends.torch_backend import TorchBackend
from membench.cells import supervision
from membench.records import Cell

FIXES = {
    "torch": "install a CUDA build of torch",
    "jax": "install jax with its CUDA plugin",
    "jittor": "Jittor compiles its CUDA build",
}


def gpu_cell(framework: str) -> Cell:
    return Cell("resnet50", framework, "baseline", 32, "gpu")


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "jax", "jittor"])
def test_a_cpu_build_under_a_gpu_preset_ends_error_naming_the_fix(framework, store):
    record = supervision.run([gpu_cell(framework)], store).records[0]
    assert record.status == "error"
    assert record.reason.startswith("DeviceMismatch: not on the GPU: preset gpu is a GPU preset")
    assert f"but {framework} runs on cpu" in record.reason
    assert FIXES[framework] in record.reason
    assert "peak_host_rss_bytes" not in record.metrics  # nothing was measured


@pytest.mark.slow
def test_jax_whose_cuda_plugin_cannot_start_does_not_fall_back_to_the_cpu(store, monkeypatch):
    # What a GPU host with a CPU-only jaxlib (or a broken plugin) gets: JAX_PLATFORMS=cuda.
    assert JaxBackend().env_vars(registry.strategy("baseline"), "cuda")["JAX_PLATFORMS"] == "cuda"
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    record = supervision.run([gpu_cell("jax")], store).records[0]
    assert record.status == "error"
    assert "but jax failed to start" in record.reason and FIXES["jax"] in record.reason
    # jax 0.7.1 without a CUDA plugin fails an assertion in its backend setup; newer ones
    # raise "Unable to initialize backend 'cuda'": either way no CPU figure is measured
    assert "Cause: " in record.reason and "peak_host_rss_bytes" not in record.metrics


def test_jax_on_a_cpu_host_keeps_its_platform_choice():
    assert "JAX_PLATFORMS" not in JaxBackend().env_vars(registry.strategy("baseline"), "cpu")


def test_a_gpu_host_refuses_a_cpu_torch_whatever_the_preset():
    torch_backend = TorchBackend()
    with pytest.raises(DeviceMismatch, match="this host has an NVIDIA GPU, but torch runs on cpu"):
        checked_environment(torch_backend, registry.preset("cpu"), host_device="cuda")


def test_a_cpu_preset_on_a_cpu_host_runs_on_the_cpu():
    env = checked_environment(TorchBackend(), registry.preset("cpu"), host_device="cpu")
    assert env["device"] == "cpu"


def test_every_gpu_preset_is_marked_and_no_other():
    marked = {p.name for p in registry.PRESETS.values() if p.gpu}
    assert marked == {p for p in registry.PRESETS if p.startswith("gpu")}
    assert {"gpu", "gpu-eval"} <= marked
