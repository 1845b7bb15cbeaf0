"""What the worker reads off a PyTorch session: the CUDA caching allocator's counters, torch's
own memory views (the CUDA snapshot, the CPU profiler's timeline), the parts a CPU step marks,
sizes read off the live tensors, the notes, and the ranks' agreement."""

from __future__ import annotations

from typing import TYPE_CHECKING

from membench.backends import Readings
from membench.backends.torch_backend import sharding
from membench.backends.torch_backend.support import AUTOCAST_DTYPES
from membench.metrics import (
    DEVICE_RESERVED_MINUS_ALLOCATED_BYTES,
    GRADIENT_BYTES,
    MODEL_STATE_BYTES,
    OPTIMIZER_STATE_BYTES,
    PARAMETER_BYTES,
    PEAK_DEVICE_ALLOCATED_BYTES,
    PEAK_DEVICE_RESERVED_BYTES,
    TRAINABLE_PARAMETERS,
)

if TYPE_CHECKING:
    from pathlib import Path


class TorchReadings(Readings):
    def reset_peaks(self) -> None:
        s = self.session
        if s.device.type == "cuda":
            s.torch.cuda.reset_peak_memory_stats(s.device)

    def memory(self) -> dict[str, float]:
        s = self.session
        if s.device.type != "cuda":
            return {}  # torch keeps no allocator statistics for CPU tensors
        cuda = s.torch.cuda
        cached = cuda.memory_reserved(s.device) - cuda.memory_allocated(s.device)
        return {
            PEAK_DEVICE_ALLOCATED_BYTES: float(cuda.max_memory_allocated(s.device)),
            PEAK_DEVICE_RESERVED_BYTES: float(cuda.max_memory_reserved(s.device)),
            DEVICE_RESERVED_MINUS_ALLOCATED_BYTES: float(cached),
        }

    def marked_step_phases(self) -> str:
        s = self.session
        if s.strategy.mode == "infer":
            return "the step as one phase: an inference step is its forward"
        if s.device.type != "cpu":
            return (
                "the step as one phase: CUDA kernels run asynchronously, so a mark between "
                "calls would time their launch, not their work"
            )
        return "forward, backward and optimizer marked (CPU kernels run as they are called)"

    def trace_step(self, prefix: Path) -> dict[str, str]:
        """On CUDA torch's memory snapshot (a pickle pytorch.org/memory_viz opens); on a CPU
        its profiler's memory timeline (HTML, categories of tensors over the step)."""
        s = self.session
        torch = s.torch
        if s.device.type == "cuda":
            path = prefix.with_name(prefix.name + ".cuda-memory-snapshot.pickle")
            torch.cuda.memory._record_memory_history(max_entries=200_000)
            try:
                s.step()
                torch.cuda.memory._dump_snapshot(str(path))
            finally:
                torch.cuda.memory._record_memory_history(enabled=None)
            return {"torch CUDA memory snapshot of one step (pytorch.org/memory_viz)": path.name}
        from torch.profiler import ProfilerActivity, profile

        with profile(
            activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
            with_stack=True,
        ) as prof:  # fmt: skip
            s.step()
        path = prefix.with_name(prefix.name + ".memory-timeline.html")
        prof.export_memory_timeline(str(path), device="cpu")
        return {"torch profiler's memory timeline of one step, by category (HTML)": path.name}

    def model_sizes(self) -> dict[str, float]:
        """Sizes read off the live tensors."""
        s = self.session
        # every resident model (two-models-sequential holds none between steps)
        # this rank's shards where the strategy shards (DTensor.to_local)
        params = [sharding.local(p) for m in s.models for p in m.parameters()]
        grads = [
            sharding.local(p.grad) for m in s.models for p in m.parameters() if p.grad is not None
        ]
        param_bytes = sum(p.numel() * p.element_size() for p in params)
        grad_bytes = sum(g.numel() * g.element_size() for g in grads)
        state_bytes = 0
        if s.optimizer is not None:
            for state in sharding.optimizer_state(s.optimizer).values():
                state_bytes += sum(
                    sharding.local(t).numel() * t.element_size()
                    for t in state.values()
                    if isinstance(t, s.torch.Tensor) and t.dim() > 0
                )
        out = {
            TRAINABLE_PARAMETERS: float(s.trainable_parameters),
            PARAMETER_BYTES: float(param_bytes),
            GRADIENT_BYTES: float(grad_bytes),
            OPTIMIZER_STATE_BYTES: float(state_bytes),
        }
        if s.world > 1:  # this rank's share of the model state
            out[MODEL_STATE_BYTES] = float(param_bytes + grad_bytes + state_bytes)
        return out

    def framework_notes(self) -> dict[str, object]:
        s = self.session
        strategy, module = s.strategy, s.module
        notes: dict[str, object] = {"device": str(s.device)}
        notes.update(s.precision_policy)
        if strategy.precision in AUTOCAST_DTYPES:
            notes["autocast_dtype"] = AUTOCAST_DTYPES[strategy.precision]
            notes["grad_scaler"] = s.scaler is not None
        if strategy.precision == "half":
            notes["model_dtype"] = "float16"
        if strategy.checkpoint:
            notes["checkpoint"] = module.CHECKPOINT_UNIT
        if hasattr(module, "ATTENTION"):
            notes["attention"] = module.ATTENTION[strategy.attention]
        if strategy.sharding != "none":
            notes["sharding"] = s.how("sharding")
            notes["rank"], notes["world_size"] = s.rank, s.world
            notes["rank_batch"] = s.spec.batch_size // s.world
            if module.HAS_BATCHNORM:
                notes["batchnorm"] = "each rank's statistics over its own batch (no SyncBatchNorm)"
        if strategy.compile:
            notes["compile"] = s.how("compile")
        return notes

    def all_ranks(self, flag: bool) -> bool:
        s = self.session
        return sharding.all_ranks(s.torch, flag, s.device) if s.world > 1 else flag
