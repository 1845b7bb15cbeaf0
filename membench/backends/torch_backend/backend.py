"""The PyTorch backend: its declarations, the environment set before torch is imported, and
its session; torch is imported inside methods, after the worker has set the env."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from membench.backends import Backend, BuildSpec, Support, device_budget_fraction, tf32_override
from membench.backends.torch_backend.session import TorchSession
from membench.backends.torch_backend.support import BASELINE, SUPPORT
from membench.registry import Strategy

# Out-of-memory that torch raises as a plain RuntimeError: cuBLAS and cuDNN failing to allocate
# their workspaces (aten/src/ATen/cuda/Exceptions.h names the status)
OOM_MARKERS = (
    "out of memory",
    "can't allocate memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
)


class TorchBackend(Backend):
    name = "torch"
    baseline = BASELINE
    support: Support = SUPPORT
    # fake tensors on the CPU, CUDA autocast applied, the caching allocator replayed
    gpu_prediction_module = "membench.backends.torch_backend.gpu_prediction"

    def combination_refusal(self, spec: BuildSpec, device: str) -> str | None:
        s = spec.strategy
        if s.compile and (s.models != "one" or s.lengths != "fixed"):
            return "compile with two models or varying lengths is not implemented"
        if s.sharding != "none" and (s.compile or s.accumulate > 1):
            return (
                "sharding with compile or gradient accumulation (DDP's no_sync, FSDP2's "
                "set_requires_gradient_sync) is not implemented"
            )
        if s.sharding in ("zero2", "zero3") and s.precision == "amp-fp16":
            return "loss scaling of FSDP2's sharded gradients is not implemented"
        return None

    def env_vars(self, strategy: Strategy, device: str) -> dict[str, str]:
        env = tf32_override(strategy, device)
        if strategy.allocator == "expandable-segments" and device == "cuda":
            env["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
        if strategy.compile:
            # A cache of our own per cell: compile time is always the cold, one-off cost,
            # never a hit on what an earlier run left in /tmp/torchinductor_$USER.
            cache = tempfile.mkdtemp(prefix="membench-inductor-")
            atexit.register(shutil.rmtree, cache, True)
            env["TORCHINDUCTOR_CACHE_DIR"] = cache
            env["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
        return env

    def _device(self) -> str:
        import torch

        if torch.cuda.is_available():
            # Fixed input shapes: let cuDNN pick its fastest kernels, as practitioners do.
            torch.backends.cudnn.benchmark = True
            return "cuda"
        return "cpu"

    def environment(self) -> dict[str, object]:
        import torch

        env: dict[str, object] = {
            "framework": "torch",
            "framework_version": torch.__version__,
            "device": self._device(),
            "torch_num_threads": torch.get_num_threads(),
            "mkldnn": torch.backends.mkldnn.is_available(),
        }
        if torch.cuda.is_available():
            env["device_name"] = torch.cuda.get_device_name(0)
            env["cuda_version"] = torch.version.cuda
            env["cudnn_version"] = torch.backends.cudnn.version()
            env["cudnn_benchmark"] = torch.backends.cudnn.benchmark
            # the TF32 flags are set per cell (set_matmul_policy): the session's notes hold them
        return env

    def create_session(self, spec: BuildSpec) -> TorchSession:
        device = self._device()
        fraction = device_budget_fraction()
        if fraction and device == "cuda":  # allocations beyond it raise OutOfMemoryError
            import torch

            torch.cuda.set_per_process_memory_fraction(fraction)
        return TorchSession(spec, device)

    def is_oom(self, exc: BaseException) -> bool:
        import torch

        if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
            return True
        text = str(exc)
        return isinstance(exc, RuntimeError) and any(m in text for m in OOM_MARKERS)
