"""The GPU paths, checked on CPU: the environment each backend sets for CUDA, read by the
frameworks' own code where it can run here; framework behaviour that only a GPU shows
(allocator limits, out-of-memory messages, NVML in containers) injected."""

import itertools
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from membench import registry
from membench.backends import BuildSpec
from membench.backends.jax_backend import MEM_FRACTION, JaxBackend
from membench.backends.jittor_backend import SAVE_MEM_CACHE_NAME, JittorBackend
from membench.backends.torch_backend import TorchBackend
from membench.capacity.search import capacity
from membench.capacity.search_steps import NO_PEAK, Budget, budget_for, fits, framework_budget
from membench.instruments import probes
from membench.measure import worker
from membench.records import PROBE_BUDGET_ENV, Cell, ProbeBudget, Record

from .conftest import REPO
from .test_probes import FakeNvml
from .test_worker_gpu_path import CudaFakeBackend

BACKENDS = {"torch": TorchBackend, "jax": JaxBackend, "jittor": JittorBackend}
GIB = 2**30


def strategy(name: str) -> registry.Strategy:
    return registry.strategy(name)


def tiny(name: str, workload: str = "transformer", batch: int = 2) -> BuildSpec:
    return BuildSpec(workload, strategy(name), registry.preset("smoke").size(workload), batch)


# -- JAX's memory cap ------------------------------------------------------------------------
@pytest.fixture
def clean_fraction(monkeypatch):
    for name in ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION", PROBE_BUDGET_ENV):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def plugin_options(env: dict[str, str], monkeypatch) -> dict:
    """What jaxlib hands the CUDA plugin under an environment (its own parser)."""
    from jaxlib import xla_client

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return xla_client.generate_pjrt_gpu_plugin_options()


def test_every_jax_cuda_cell_lifts_xla_s_cap_without_preallocating(clean_fraction):
    env = JaxBackend().env_vars(strategy("baseline"), "cuda")
    options = plugin_options(env, clean_fraction)
    assert options["memory_fraction"] == MEM_FRACTION == 0.95
    assert options["preallocate"] is False
    assert env["JAX_PLATFORMS"] == "cuda"
    cpu = JaxBackend().env_vars(strategy("baseline"), "cpu")
    assert cpu == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def test_a_capacity_budget_replaces_the_fraction_and_is_held_as_one_region(clean_fraction):
    # a budget the four-digit fraction once rounded: XLA gets the share's exact float
    budget = ProbeBudget(24 * 2**30, 150_754_820_096)
    clean_fraction.setenv(PROBE_BUDGET_ENV, budget.env()[PROBE_BUDGET_ENV])
    env = JaxBackend().env_vars(strategy("baseline"), "cuda")
    options = plugin_options(env, clean_fraction)
    assert options["memory_fraction"] == budget.device_fraction == 24 * 2**30 / 150_754_820_096
    # grown region by region the pool refused a buffer with most of the budget free
    assert options["preallocate"] is True


def test_the_fraction_takes_the_spelling_already_set_never_both(clean_fraction):
    # jaxlib refuses both spellings at once (and the plugin then does not start)
    clean_fraction.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.3")
    env = JaxBackend().env_vars(strategy("baseline"), "cuda")
    assert "XLA_CLIENT_MEM_FRACTION" not in env
    assert plugin_options(env, clean_fraction)["memory_fraction"] == 0.95
    clean_fraction.setenv("XLA_CLIENT_MEM_FRACTION", "0.95")
    from jaxlib import xla_client

    with pytest.raises(ValueError, match="specified together"):
        xla_client.generate_pjrt_gpu_plugin_options()


class FakeGpu:
    """A JAX device as the CUDA plugin reports it (no GPU here)."""

    platform, device_kind = "gpu", "NVIDIA H100 80GB HBM3"

    def memory_stats(self) -> dict[str, int]:
        return {"bytes_limit": 76_450_000_000, "peak_bytes_in_use": 0}


def test_the_record_carries_the_fraction_and_xla_s_bytes_limit(clean_fraction):
    import jax

    for key, value in JaxBackend().env_vars(strategy("baseline"), "cuda").items():
        clean_fraction.setenv(key, value)
    clean_fraction.setattr(jax, "devices", lambda: [FakeGpu()])
    env = JaxBackend().environment()
    assert env["device"] == "cuda" and env["xla_preallocate"] == "false"
    assert env["xla_mem_fraction"] == 0.95
    assert env["xla_mem_fraction_variable"] == "XLA_CLIENT_MEM_FRACTION"
    assert env["xla_bytes_limit"] == 76_450_000_000


# -- one precision policy --------------------------------------------------------------------
def test_fp32_cells_are_fp32_in_full_in_every_framework_on_cuda():
    s = strategy("baseline")
    for backend in BACKENDS.values():
        assert backend().env_vars(s, "cuda")["NVIDIA_TF32_OVERRIDE"] == "0"
    assert JaxBackend().env_vars(s, "cuda")["JAX_DEFAULT_MATMUL_PRECISION"] == "highest"
    assert JittorBackend().env_vars(s, "cuda")["use_tensorcore"] == "0"


def test_tf32_is_a_measured_row_on_cuda_and_refused_on_cpu():
    tf32 = strategy("tf32")
    for name, backend in BACKENDS.items():
        env = backend().env_vars(tf32, "cuda")
        assert "NVIDIA_TF32_OVERRIDE" not in env, name
        assert backend().refusal(tiny("tf32", "resnet50"), "cuda") is None
        assert "CPUs compute float32 in full" in backend().refusal(tiny("tf32", "resnet50"), "cpu")
    assert JaxBackend().env_vars(tf32, "cuda")["JAX_DEFAULT_MATMUL_PRECISION"] == "tensorfloat32"
    assert JittorBackend().env_vars(tf32, "cuda")["use_tensorcore"] == "1"


def test_the_jax_precision_names_are_jax_s_own():
    import jax

    from membench.backends.jax_backend import MATMUL_PRECISION

    for value in MATMUL_PRECISION.values():
        jax.config.update("jax_default_matmul_precision", value)
    jax.config.update("jax_default_matmul_precision", None)


def test_torch_sets_both_tf32_flags_and_records_them():
    import torch

    from membench.backends.torch_backend import set_matmul_policy

    torch.backends.cudnn.allow_tf32 = True  # torch's default: cuDNN convolutions on TF32
    try:
        notes = TorchBackend().build(tiny("baseline")).notes()
        assert notes["matmul"] == "fp32"
        assert notes["matmul_allow_tf32"] is False and notes["cudnn_allow_tf32"] is False
        on = set_matmul_policy(torch, "tf32")
        assert on["matmul_allow_tf32"] is on["cudnn_allow_tf32"] is True
    finally:
        set_matmul_policy(torch, "fp32")


def test_jax_records_its_policy():
    notes = JaxBackend().build(tiny("baseline")).notes()
    assert notes["matmul"] == "fp32" and "jax_default_matmul_precision" in notes


# -- fused attention that is fused -------------------------------------------------------------
def test_the_jax_fused_kernel_is_cudnn_only_where_cudnn_applies():
    from models.transformer.flax_impl import attention_implementation

    assert attention_implementation("bfloat16", "gpu") == "cudnn"
    assert attention_implementation("float16", "gpu") == "cudnn"
    assert attention_implementation("float32", "gpu") == "xla"
    assert attention_implementation("bfloat16", "cpu") == "xla"


def test_a_bf16_fused_cell_on_a_gpu_asks_for_cudnn(monkeypatch):
    import jax
    import jax.numpy as jnp

    from models.transformer.flax_impl import fused_attention

    q = jnp.ones((1, 8, 2, 16), jnp.bfloat16)
    assert fused_attention(q, q, q).shape == q.shape  # on the CPU: XLA's attention
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    with pytest.raises(RuntimeError, match="cuDNN"):  # explicit: never a silent fallback
        fused_attention(q, q, q)


def test_an_fp32_jax_fused_cell_says_it_ran_xla_s_attention():
    assert JaxBackend().build(tiny("fused-attention")).notes()["attention_kernel"] == "xla"


def test_the_bf16_fused_row_compares_the_same_precision_in_torch_and_jax():
    s = strategy("fused-attention-bf16")
    assert (s.precision, s.attention) == ("amp-bf16", "fused")
    for backend in (TorchBackend, JaxBackend):
        assert backend().refusal(tiny("fused-attention-bf16"), "cuda") is None


# -- Jittor's capacity and budget ------------------------------------------------------------
def record(framework: str, metrics: dict[str, float], status: str = "ok") -> Record:
    cell = Cell("resnet50", framework, "baseline", 8, "gpu")
    return Record(cell=cell, status=status, metrics=metrics)


def test_each_framework_fits_on_its_own_peak_layer():
    device = budget_for("cuda", 10 * GIB)
    baseline = strategy("baseline")
    torch_budget = framework_budget(device, "torch", baseline)
    # torch's fraction caps its caching allocator's reserve: it decides (allocated where absent)
    assert torch_budget.enforced and torch_budget.layer == "peak_device_reserved_bytes"
    assert torch_budget.fallbacks == ("peak_device_allocated_bytes",)
    jax_budget = framework_budget(device, "jax", baseline)
    assert jax_budget.enforced and jax_budget.layer == "peak_device_allocated_bytes"
    jittor = framework_budget(device, "jittor", baseline)
    assert not jittor.enforced and "src/mem/swap.cc" in jittor.note
    probe = fits(record("jittor", {"jittor_cuda_reserved_bytes": 9 * GIB}), jittor)
    assert probe.fits and probe.layer == "jittor_cuda_reserved_bytes"
    nvml = fits(record("jittor", {"peak_device_process_bytes": 11 * GIB}), jittor)
    assert not nvml.fits and nvml.status == "ok" and nvml.layer == "peak_device_process_bytes"


def test_a_missing_metric_is_undecided_not_a_non_fit():
    jittor = framework_budget(budget_for("cuda", GIB), "jittor", strategy("baseline"))
    probe = fits(record("jittor", {"peak_host_rss_bytes": 1.0}), jittor)
    assert probe.status == NO_PEAK and not probe.fits
    assert "jittor emitted none of jittor_cuda_reserved_bytes" in probe.reason
    oom = fits(record("jittor", {}, status="oom"), jittor)
    assert oom.status == "oom" and not oom.fits


def test_jittor_s_limit_binds_only_with_its_swapping_allocator(monkeypatch):
    monkeypatch.setenv(PROBE_BUDGET_ENV, ProbeBudget(2**30, 2**31).env()[PROBE_BUDGET_ENV])
    assert JittorBackend.unenforced_device_limit(strategy("save-mem")) is None
    assert "device_mem_limit" not in JittorBackend().env_vars(strategy("baseline"), "cuda")


def test_a_search_whose_probes_lack_the_metric_ends_with_an_error(fake_framework, store):
    # the fake framework emits no device metric: on a device budget no fit can be decided
    budget = Budget(GIB, "peak_device_allocated_bytes", enforced=True)
    result = capacity("fake-work", "fake", "baseline", "smoke", budget, store, first=4)
    assert result.status == "error" and result.largest_fit == 0
    assert "fake emitted none of peak_device_allocated_bytes" in result.reason
    assert [p["batch_size"] for p in result.probes] == [4]  # stopped at the first


# -- out-of-memory recognised ------------------------------------------------------------------
OOMS = {
    "torch": [
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
        RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
    ],
    "jittor": [
        RuntimeError(
            "[f 1122 18:09:11.07 72 cuda_device_allocator.cc:31] "
            "Unable to alloc cuda device memory for size1073741824"
        )
    ],
    "jax": [],
}


def test_each_framework_s_out_of_memory_ends_oom():
    from jax.errors import JaxRuntimeError

    OOMS["jax"].append(
        JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2.00GiB.")
    )
    cell = Cell("resnet50", "torch", "baseline", 2048, "gpu")
    for name, errors in OOMS.items():
        for exc in errors:
            assert worker.classify(cell, BACKENDS[name](), exc).status == "oom", (name, exc)
    not_oom = RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED")
    assert worker.classify(cell, TorchBackend(), not_oom).status == "error"


# -- NVML --------------------------------------------------------------------------------------
def test_a_matching_pid_with_zero_bytes_falls_back_to_device_minus_baseline():
    procs = [SimpleNamespace(pid=42, usedGpuMemory=0)]
    reader = probes.NvmlReader(pid=42, nvml=FakeNvml(procs, iter([1000, 1600])))
    assert reader() == 600 and reader.method == "device-minus-baseline"


def test_an_nvml_failure_to_list_processes_falls_back_and_is_recorded():
    nvml = FakeNvml([], iter([1000, 1700]))

    def broken(handle):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    nvml.nvmlDeviceGetComputeRunningProcesses = broken
    reader = probes.NvmlReader(pid=42, nvml=nvml)
    assert reader() == 700 and reader.method == "device-minus-baseline"
    assert "NVML_ERROR_NOT_SUPPORTED" in reader.process_error


def test_the_record_names_the_method_that_gave_the_peak(monkeypatch, fake_framework):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "count")
    monkeypatch.setattr(worker, "detected_device", lambda: "cuda")
    readings = itertools.chain([100], itertools.repeat(0))  # 0: NVML cannot tell
    nvml = FakeNvml([], itertools.chain([1000], itertools.repeat(1500)))
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda handle: [
        SimpleNamespace(pid=probes.os.getpid(), usedGpuMemory=next(readings))
    ]
    monkeypatch.setattr(worker, "NvmlReader", lambda: probes.NvmlReader(nvml=nvml))
    rec = worker.measure(Cell("fake-work", "fake", "baseline", 1, "smoke"), CudaFakeBackend(), {})
    assert rec.metrics["peak_device_process_bytes"] == 500
    assert rec.environment["nvml_method"] == "device-minus-baseline"
    assert rec.environment["nvml_methods"]["process"] == 1  # the first sample's 100


# -- save-mem ----------------------------------------------------------------------------------
def test_only_save_mem_cells_compile_jittor_s_core_with_jt_save_mem_in_their_own_cache():
    for s in registry.STRATEGIES.values():
        env = JittorBackend().env_vars(s, "cuda")
        assert ("JT_SAVE_MEM" in env) == (env.get("cache_name") == SAVE_MEM_CACHE_NAME), s.name


def jittor_cache_path(env: dict[str, str]) -> str:
    code = "import jittor_utils; print(jittor_utils.cache_path)"  # no compile, no CUDA
    full = {**os.environ, "nvcc_path": "", **env}
    out = subprocess.run(
        [sys.executable, "-c", code], env=full, cwd=REPO, capture_output=True, text=True
    )
    return out.stdout.strip().splitlines()[-1]


def test_jittor_puts_the_save_mem_core_in_a_cache_of_its_own():
    env = JittorBackend().env_vars(strategy("save-mem"), "cuda")
    own = jittor_cache_path({"cache_name": env["cache_name"]})
    default = jittor_cache_path({})
    assert own.endswith("/" + SAVE_MEM_CACHE_NAME) and own != default
    assert os.path.dirname(own) == os.path.dirname(default)  # same home, same toolchain key
