"""The Jittor backend: its declarations, the environment set before jittor is imported, and
its session."""

from __future__ import annotations

import sys

from membench.backends import (
    Backend,
    BuildSpec,
    Support,
    tf32_override,
)
from membench.backends.jittor_backend.runtime import (
    SAVE_MEM_CACHE_NAME,
    SAVE_MEM_DEVICE_LIMIT_BYTES,
    base_env,
    onednn_in_use,
)
from membench.backends.jittor_backend.session import JittorSession
from membench.backends.jittor_backend.support import BASELINE, SUPPORT
from membench.registry import Strategy

# Jittor's out-of-memory: its CUDA allocator's fatal log (src/mem/allocator/
# cuda_device_allocator.cc), CUDA's own status, and the host allocator's
OOM_MARKERS = (
    "out of memory",
    "Out of memory",
    "std::bad_alloc",
    "mem_limit",
    "Unable to alloc cuda device memory",
    "cudaErrorMemoryAllocation",
)


class JittorBackend(Backend):
    name = "jittor"
    baseline = BASELINE
    support: Support = SUPPORT

    @classmethod
    def unenforced_device_limit(cls, strategy: Strategy) -> str | None:
        if strategy.allocator == "host-swap":
            return None
        return (
            "Jittor reads device_mem_limit only in its swapping allocator (src/mem/swap.cc, "
            "JT_SAVE_MEM): without it nothing stops an allocation past the budget"
        )

    def env_vars(self, strategy: Strategy, device: str) -> dict[str, str]:
        env = base_env(device)
        if not strategy.fusion:
            env["no_fuse"] = "1"  # a Jittor flag read from the environment at import
        if device == "cuda":
            env["use_tensorcore"] = "1" if strategy.matmul == "tf32" else "0"
            env.update(tf32_override(strategy, device))
        if device == "cuda" and strategy.allocator == "cuda-managed":
            env["use_cuda_managed_allocator"] = "1"
        if device == "cuda" and strategy.allocator == "host-swap":
            env["JT_SAVE_MEM"] = "1"
            env["device_mem_limit"] = str(SAVE_MEM_DEVICE_LIMIT_BYTES)
            env["cache_name"] = SAVE_MEM_CACHE_NAME
        # No capacity budget is passed on: device_mem_limit binds only with JT_SAVE_MEM
        # (unenforced_device_limit), and capacity applies the budget to the measured peak.
        return env

    def _device(self) -> str:
        import jittor as jt

        return "cuda" if jt.has_cuda else "cpu"

    def environment(self) -> dict[str, object]:
        import jittor as jt

        env: dict[str, object] = {
            "framework": "jittor",
            "framework_version": jt.__version__,
            "device": self._device(),
            "onednn": onednn_in_use(),
            "jittor_cache_path": str(jt.flags.cache_path),
            "jittor_cc_path": str(jt.flags.cc_path),
            "no_fuse": int(jt.flags.no_fuse),
            "torch_in_process": "torch" in sys.modules,  # FIX_TORCH_ERROR=0 keeps it out
        }
        if jt.has_cuda:
            env["nvcc_path"] = str(jt.flags.nvcc_path)
            env["use_cuda_managed_allocator"] = int(jt.flags.use_cuda_managed_allocator)
        return env

    def create_session(self, spec: BuildSpec) -> JittorSession:
        return JittorSession(spec, self._device())

    def is_oom(self, exc: BaseException) -> bool:
        text = str(exc)
        return isinstance(exc, MemoryError) or any(m in text for m in OOM_MARKERS)
