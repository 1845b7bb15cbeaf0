"""What the worker reads off a Jittor session: its allocators' reserved bytes after each step (it
keeps no peak counter), the kernels its first step compiled, its peak-memory report, sizes read
off the live Vars and the optimizer, and the notes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from membench.backends import Readings
from membench.backends.jittor_backend.batchnorm import trainable
from membench.backends.jittor_backend.runtime import jit_cache_files, onednn_in_use
from membench.backends.jittor_backend.support import HALF_DTYPES
from membench.metrics import (
    GRADIENT_BYTES,
    JITTOR_CPU_RESERVED_BYTES,
    JITTOR_CUDA_RESERVED_BYTES,
    JITTOR_JIT_KERNELS_COMPILED_FIRST_STEP,
    OPTIMIZER_STATE_BYTES,
    PARAMETER_BYTES,
    RUNNING_STATISTICS,
    TRAINABLE_PARAMETERS,
)

if TYPE_CHECKING:
    from pathlib import Path


class JittorReadings(Readings):
    def __init__(self, session: object) -> None:
        super().__init__(session)
        self._reserved_max: dict[str, int] = {}
        self.jit_files_before = jit_cache_files()  # the build's: the first step compiles
        self.jit_kernels_first_step = 0

    # -- counters ------------------------------------------------------------------------
    def after_step(self) -> None:
        if self.session.steps == 1:
            self.jit_kernels_first_step = jit_cache_files() - self.jit_files_before
        info = self.session.jt.get_mem_info()
        for name, value in (("cpu", info.total_cpu_used), ("cuda", info.total_cuda_used)):
            self._reserved_max[name] = max(self._reserved_max.get(name, 0), int(value))

    def reset_peaks(self) -> None:
        self._reserved_max = {}

    def memory(self) -> dict[str, float]:
        # Jittor keeps no peak counter: the highest reading of its allocators' reserved bytes
        # (used + cached) after a measured step. Its caching allocator keeps freed blocks, so
        # the reading after a step holds what the step needed at once (up to fragmentation).
        out = {JITTOR_CPU_RESERVED_BYTES: float(self._reserved_max.get("cpu", 0))}
        if self.session.device == "cuda":
            out[JITTOR_CUDA_RESERVED_BYTES] = float(self._reserved_max.get("cuda", 0))
        return out

    def marked_step_phases(self) -> str:
        return (
            "the step as one phase: Jittor runs lazily, the whole step's graph at its sync "
            "(a mark between calls would time the graph's building)"
        )

    def trace_step(self, prefix: Path) -> dict[str, str]:
        """Jittor's report of its peak memory over one more step (profile_memory_enable): the
        peak and the variables alive at it. Its call sites need trace_py_var, which Jittor
        1.3.11 refuses on Python 3.11 ("python3.11 not supported yet"): not asked for."""
        jt = self.session.jt
        with jt.flag_scope(profile_memory_enable=1):
            self.session.step()
            _, text = jt.get_max_memory_treemap(do_print=False)
        path = prefix.with_name(prefix.name + ".max-memory-treemap.txt")
        path.write_text(text)
        return {"Jittor's peak memory over one step and the variables alive at it": path.name}

    # -- sizes and notes -----------------------------------------------------------------
    def model_sizes(self) -> dict[str, float]:
        s = self.session
        # the current Vars (half() reassigns) of every resident model (none: two-sequential)
        params = [p for m in s.models for p in trainable(m)]
        param_bytes = sum(p.numel() * p.dtype.dsize() for p in params)
        out: dict[str, float] = {
            TRAINABLE_PARAMETERS: float(s.trainable_parameters),
            RUNNING_STATISTICS: float(s.running_statistics),
            PARAMETER_BYTES: float(param_bytes),
            JITTOR_JIT_KERNELS_COMPILED_FIRST_STEP: float(self.jit_kernels_first_step),
        }
        if s.optimizer is not None:
            groups = s.optimizer.param_groups
            grads = sum(g.numel() * g.dtype.dsize() for pg in groups for g in pg.get("grads", []))
            state = sum(v.numel() * v.dtype.dsize() for pg in groups for v in pg["values"])
            out[GRADIENT_BYTES] = float(grads)
            out[OPTIMIZER_STATE_BYTES] = float(state)
        return out

    def framework_notes(self) -> dict[str, object]:
        s = self.session
        strategy, jt = s.strategy, s.jt
        notes: dict[str, object] = {
            "device": s.device,
            "fusion": "off (no_fuse=1)" if jt.flags.no_fuse else "on (Jittor always fuses)",
            "jit": "each new fused op is compiled on first use and cached on disk; the first "
            "step holds that compilation (none where an earlier cell cached the same ops)",
            "onednn": onednn_in_use(),
            "jittor_memory": "jt.get_mem_info() reserved bytes, highest reading after a step",
        }
        if strategy.precision in ("amp-fp16", "amp-bf16"):
            notes["amp_level"] = s.amp_level
            notes["input_dtype"] = HALF_DTYPES[strategy.precision]
            notes["param_dtype"] = "float32"
            notes["loss_scaling"] = "none: Jittor has no loss scaler"
        if strategy.precision == "half":
            notes["model_dtype"] = "float16"
        if strategy.accumulate > 1 and strategy.accumulate_mode == "sync":
            notes["accumulate"] = s.how("accumulate") + "; jt.sync_all() after each micro-batch"
        if strategy.allocator in ("cuda-managed", "host-swap"):
            notes["allocator"] = s.how("allocator")
        notes["matmul"] = strategy.matmul
        notes["use_tensorcore"] = int(jt.flags.use_tensorcore)
        return notes
