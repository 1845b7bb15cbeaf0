"""The JAX backend: its declarations, the environment set before jax is imported (XLA's
allocator, platforms, matmul precision), and its session."""

from __future__ import annotations

import os
from collections.abc import Mapping

from membench.backends import Backend, BuildSpec, Support, device_budget_fraction, tf32_override
from membench.backends.jax_backend import sharding as jax_sharding
from membench.backends.jax_backend.session import JaxSession
from membench.backends.jax_backend.support import BASELINE, SUPPORT
from membench.registry import Strategy

# XLA's allocator limit is total memory x this fraction, preallocated or not (default 0.75:
# JAX would run out ~20 GiB before torch on an 80 GB card). Not 1.0: the CUDA context and the
# cuBLAS/cuDNN workspaces live outside XLA's pool.
MEM_FRACTION = 0.95
# jaxlib's xla_client.generate_pjrt_gpu_plugin_options reads XLA_CLIENT_MEM_FRACTION, and the
# older name as a deprecated alias; both set is a ValueError, and the plugin does not start.
FRACTION_VARIABLES = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
# jax_default_matmul_precision per policy: XLA's default on GPUs is TF32 for float32 dots and
# convolutions (jax/_src/config.py; jax issue 18934); "highest" is float32 in full.
MATMUL_PRECISION = {"fp32": "highest", "tf32": "tensorfloat32"}
# Out-of-memory as XLA reports it (a JaxRuntimeError with the status name)
OOM_MARKERS = ("RESOURCE_EXHAUSTED", "Out of memory")


def fraction_variable(environ: Mapping[str, str] = os.environ) -> str:
    """The variable that carries the fraction: the spelling already set, else the current one."""
    return next((v for v in FRACTION_VARIABLES if v in environ), FRACTION_VARIABLES[0])


class JaxBackend(Backend):
    name = "jax"
    baseline = BASELINE
    support: Support = SUPPORT
    one_process_drives_ranks = True  # one controller drives every device of the Mesh
    # XLA's GPU compiler for the card's target: it comes only with jaxlib's CUDA plugin
    gpu_prediction_module = "membench.backends.jax_backend.gpu_prediction"
    gpu_prediction_environment = "predict"

    def world_env_vars(self, world_size: int, device: str) -> dict[str, str]:
        # on CPUs the Mesh's devices are XLA host devices, made at import
        return jax_sharding.host_devices_env(world_size) if device == "cpu" else {}

    def combination_refusal(self, spec: BuildSpec, device: str) -> str | None:
        s = spec.strategy
        if s.accumulate > 1 and s.precision == "amp-fp16":
            # GradScaler skips the whole step on an overflow in any micro-batch; Flax's
            # DynamicScale decides per call, and MultiSteps would fold the overflow in.
            return (
                "loss scaling across accumulated micro-batches is not implemented (an overflow "
                "in one micro-batch must skip the whole step)"
            )
        if s.sharding != "none" and (
            s.accumulate > 1 or s.precision == "amp-fp16" or s.data != "device"
        ):
            return (
                "sharding with gradient accumulation, loss scaling or a host batch is not "
                "implemented"
            )
        return None

    def env_vars(self, strategy: Strategy, device: str) -> dict[str, str]:
        # Without this JAX takes 75% of GPU memory at start and every peak reads the same.
        env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        if device == "cuda":
            # A CUDA plugin that fails to start would otherwise only warn, and JAX would run on
            # the CPU under a GPU preset; with this it raises, and the device guard says why.
            env["JAX_PLATFORMS"] = "cuda"
            # the allocator's limit, preallocated or not: a capacity budget, else MEM_FRACTION
            budget = device_budget_fraction()
            env[fraction_variable()] = str(budget or MEM_FRACTION)  # the float's exact digits
            if budget:
                # Under a budget XLA's allocator must hold it as one region, as JAX does by
                # default: growing region by region, it refused a 12.45 GiB buffer within
                # 24 GiB with most of the pool free (H200, ResNet-50 at batch 149), a false
                # out-of-memory. peak_bytes_in_use still reads the step's own peak.
                env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "true"
            env["JAX_DEFAULT_MATMUL_PRECISION"] = MATMUL_PRECISION[strategy.matmul]
            env.update(tf32_override(strategy, device))
        return env

    def environment(self) -> dict[str, object]:
        import jax

        device = jax.devices()[0]
        env: dict[str, object] = {
            "framework": "jax",
            "framework_version": jax.__version__,
            "device": "cuda" if device.platform == "gpu" else device.platform,
            "device_name": device.device_kind,
            "jax_backend": jax.default_backend(),
            "xla_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true"),
        }
        if device.platform == "gpu":
            variable = fraction_variable()
            env["xla_mem_fraction"] = float(os.environ.get(variable, 0.75))  # 0.75: XLA's own
            env["xla_mem_fraction_variable"] = variable
            # the limit XLA's allocator enforces: what JAX may use of the card
            env["xla_bytes_limit"] = int((device.memory_stats() or {}).get("bytes_limit", 0))
        return env

    def create_session(self, spec: BuildSpec) -> JaxSession:
        return JaxSession(spec)

    @classmethod
    def compiled_memory_module(cls) -> str | None:
        return "membench.backends.jax_backend.compiled_memory"

    def is_oom(self, exc: BaseException) -> bool:
        text = str(exc)
        return isinstance(exc, MemoryError) or any(m in text for m in OOM_MARKERS)
