"""PyTorch backend. torch is imported inside methods, after the worker has set the env."""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import tempfile
from contextlib import nullcontext
from typing import Any

from membench.backends import (
    ANY,
    Backend,
    BuildSpec,
    Implemented,
    Session,
    Support,
    Unsupported,
    device_budget_fraction,
    model_options,
)
from membench.registry import Strategy, workload

_AUTOCAST_DTYPES = {"amp-bf16": "bfloat16", "amp-fp16": "float16"}


def model_module(workload_name: str) -> Any:
    modules = workload(workload_name).model_modules
    if "torch" not in modules:
        raise Unsupported(f"workload {workload_name} has no PyTorch model")
    return importlib.import_module(modules["torch"])


class TorchSession(Session):
    def __init__(self, spec: BuildSpec, device: str):
        import torch

        self.torch = torch
        self.spec = spec
        self.strategy = strategy = spec.strategy
        self.device = torch.device(device)
        self.module = module = model_module(spec.workload)
        self.loss_fn = module.loss_fn

        torch.manual_seed(spec.seed)
        self.model = module.build(
            spec.size.inputs, checkpoint=strategy.checkpoint, **model_options(spec)
        )
        self.model.to(self.device)
        self.trainable_parameters = sum(p.numel() for p in self.model.parameters())
        inputs, targets = (
            torch.from_numpy(a).to(self.device)
            for a in module.synthetic_batch(spec.batch_size, spec.size.inputs, spec.seed)
        )
        if strategy.precision == "half":
            self.model.half()
            if inputs.is_floating_point():  # token ids stay integers
                inputs = inputs.half()
        self.inputs, self.targets = inputs, targets

        self.autocast = nullcontext()
        self.scaler = None
        if strategy.precision in _AUTOCAST_DTYPES:
            dtype = getattr(torch, _AUTOCAST_DTYPES[strategy.precision])
            self.autocast = torch.autocast(self.device.type, dtype=dtype)
            if strategy.precision == "amp-fp16":
                # Dynamic loss scaling keeps small fp16 gradients from flushing to zero.
                self.scaler = torch.amp.GradScaler(self.device.type)

        self.forward = torch.compile(self.model) if strategy.compile else self.model
        if strategy.mode == "infer":
            self.model.eval()
            self.optimizer = None
        else:
            self.model.train()
            self.optimizer = module.make_optimizer(self.model.parameters())

    # -- steps -------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def accumulate_gradients(self) -> Any:
        """Forward and backward over the strategy's micro-batches; returns the loss.

        Each micro-batch loss is divided by k, so the summed gradients are those of the
        mean loss over the whole batch.
        """
        k = self.strategy.accumulate
        total = self.torch.zeros((), device=self.device)
        for x, y in zip(self.inputs.chunk(k), self.targets.chunk(k), strict=True):
            with self.autocast:
                loss = self.loss_fn(self.forward(x), y) / k
            (self.scaler.scale(loss) if self.scaler else loss).backward()
            total += loss.detach()
        return total

    def gradients(self, max_tries: int = 32) -> dict[str, Any]:
        """The gradients of one step, unscaled, without updating the weights (for tests).

        With loss scaling, a step whose scaled gradients overflow is skipped and the scale
        lowered, as GradScaler.step does in training; the first finite gradients are returned.
        """
        for _ in range(max_tries):
            self.optimizer.zero_grad(set_to_none=True)
            self.accumulate_gradients()
            grads = {n: p.grad for n, p in self.model.named_parameters()}
            if not self.scaler:
                break
            self.scaler.unscale_(self.optimizer)
            if all(bool(self.torch.isfinite(g).all()) for g in grads.values()):
                break
            self.scaler.update()  # records the overflow: the next try uses a lower scale
        else:
            raise RuntimeError(f"gradients still overflow after {max_tries} scale reductions")
        return {n: g.detach().clone() for n, g in grads.items()}

    def step(self) -> None:
        torch = self.torch
        if self.strategy.mode == "infer":
            with torch.inference_mode(), self.autocast:
                self.forward(self.inputs)
        else:
            self.optimizer.zero_grad(set_to_none=True)
            self.accumulate_gradients()
            if self.scaler:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
        self._sync()

    # -- counters ------------------------------------------------------------------------
    def reset_peaks(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def memory(self) -> dict[str, float]:
        if self.device.type != "cuda":
            return {}  # torch keeps no allocator statistics for CPU tensors
        cuda = self.torch.cuda
        return {
            "peak_device_allocated_bytes": float(cuda.max_memory_allocated(self.device)),
            "peak_device_reserved_bytes": float(cuda.max_memory_reserved(self.device)),
        }

    def static_metrics(self) -> dict[str, float]:
        """Sizes read off the live tensors after the measured steps."""
        params = list(self.model.parameters())
        param_bytes = sum(p.numel() * p.element_size() for p in params)
        grad_bytes = sum(
            p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None
        )
        state_bytes = 0
        if self.optimizer is not None:
            for state in self.optimizer.state.values():
                state_bytes += sum(
                    t.numel() * t.element_size()
                    for t in state.values()
                    if isinstance(t, self.torch.Tensor) and t.dim() > 0
                )
        return {
            "trainable_parameters": float(self.trainable_parameters),
            "parameter_bytes": float(param_bytes),
            "gradient_bytes": float(grad_bytes),
            "optimizer_state_bytes": float(state_bytes),
            # params + grads + optimizer state: what no strategy but sharding can remove
            "analytic_floor_bytes": float(param_bytes + grad_bytes + state_bytes),
        }

    def notes(self) -> dict[str, object]:
        s = self.strategy
        notes: dict[str, object] = {"mode": s.mode, "device": str(self.device)}
        if s.precision in _AUTOCAST_DTYPES:
            notes["autocast_dtype"] = _AUTOCAST_DTYPES[s.precision]
            notes["grad_scaler"] = self.scaler is not None
        if s.precision == "half":
            notes["model_dtype"] = "float16"
        if s.accumulate > 1:
            notes["micro_batch"] = self.spec.batch_size // s.accumulate
            if self.module.HAS_BATCHNORM:
                notes["batchnorm"] = "train-mode statistics over each micro-batch"
        if s.checkpoint:
            notes["checkpoint"] = self.module.CHECKPOINT_UNIT
        if hasattr(self.module, "ATTENTION"):
            notes["attention"] = self.module.ATTENTION[s.attention]
        if s.compile:
            notes["compile"] = (
                "torch.compile(model), default mode, cold cache; the first step includes it"
            )
        return notes


JITTOR_LEVER = (
    "a Jittor allocator lever (use_cuda_managed_allocator, JT_SAVE_MEM); PyTorch's caching "
    "allocator has no such mode"
)


class TorchBackend(Backend):
    name = "torch"
    baseline = "fp32 training step in eager mode: forward, loss, backward, optimizer step"
    support: Support = {
        "precision": {
            "amp-bf16": Implemented("torch.autocast(dtype=bfloat16) around forward and loss"),
            "amp-fp16": Implemented(
                "torch.autocast(dtype=float16) and a GradScaler (dynamic loss scaling)"
            ),
            "half": Implemented("model and input cast to float16 (model.half())"),
        },
        "checkpoint": {True: Implemented("torch.utils.checkpoint per block, use_reentrant=False")},
        "accumulate": {
            ANY: Implemented("k micro-batches, each loss divided by k, one optimizer step")
        },
        "accumulate_mode": {
            "scan": "PyTorch has no in-graph loop for a training step: its users accumulate in "
            "a Python loop of forward/backward calls, which is the loop mode",
            "sync": "PyTorch frees a micro-batch's activations when its backward ends (eager; "
            "on CUDA the caching allocator reuses them in stream order): a synchronisation "
            "after each micro-batch changes no memory, it only adds waiting",
        },
        "mode": {"infer": Implemented("model.eval() and torch.inference_mode(), forward only")},
        "compile": {
            True: Implemented("torch.compile(model), default mode; its cost is in the first step")
        },
        "allocator": {
            "expandable-segments": Implemented(
                "PYTORCH_ALLOC_CONF=expandable_segments:True, set before import",
                devices=("cuda",),
                elsewhere="expandable_segments configures the CUDA caching allocator; "
                "CPU tensors use the host's malloc",
            ),
            "cuda-managed": JITTOR_LEVER,
            "host-swap": JITTOR_LEVER,
        },
        "fusion": {
            False: "PyTorch eager runs every operator as a kernel of its own: the baseline is "
            "already the unfused run (compile is the fused one)"
        },
        "attention": {
            "fused": Implemented("torch.nn.functional.scaled_dot_product_attention(is_causal=True)")
        },
    }

    def env_vars(self, strategy: Strategy, device: str) -> dict[str, str]:
        env = {}
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
            # fp32 semantics on GPUs: whether convolutions/matmuls may use TF32 tensor cores
            env["cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
            env["matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
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
        return isinstance(exc, RuntimeError) and (
            "out of memory" in text or "can't allocate memory" in text
        )
