"""PyTorch backend. torch is imported inside methods, after the worker has set the env."""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from membench import marks
from membench.backends import (
    ANY,
    TF32_ELSEWHERE,
    Backend,
    BuildSpec,
    Implemented,
    Session,
    Support,
    Unsupported,
    device_budget_fraction,
    model_options,
    tf32_override,
)
from membench.backends import torch_sharding as sharding
from membench.backends.phases import (
    COLLECTOR,
    TRANSFER,
    PhaseClock,
    hygiene_due,
    lengths_for_step,
    model_seeds,
)
from membench.registry import Strategy, workload

if TYPE_CHECKING:
    import numpy as np

MAX_SCALE_REDUCTIONS = 32  # GradScaler halves its scale per overflow: 2**16 down to 2**-16
_AUTOCAST_DTYPES = {"amp-bf16": "bfloat16", "amp-fp16": "float16"}
# Out-of-memory that torch raises as a plain RuntimeError: cuBLAS and cuDNN failing to allocate
# their workspaces (aten/src/ATen/cuda/Exceptions.h names the status)
OOM_MARKERS = (
    "out of memory",
    "can't allocate memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
)


def set_matmul_policy(torch: Any, matmul: str) -> dict[str, object]:
    """Set the float32 policy explicitly (torch's GPU defaults differ: matmuls full fp32,
    cuDNN convolutions TF32) and return the flags as read back, for the record."""
    tf32 = matmul == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    return {
        "matmul": matmul,
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
    }


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
        self.rank, self.world = 0, 1
        if spec.world_size > 1:  # a rank of a data-parallel cell: its process group, its device
            self.rank, self.world, self.device = sharding.init_process_group(torch)
        self.module = module = model_module(spec.workload)
        self.loss_fn = module.loss_fn

        torch.manual_seed(spec.seed)
        self.model = module.build(
            spec.size.inputs, checkpoint=strategy.checkpoint, **model_options(spec)
        )
        self.model.to(self.device)
        self.trainable_parameters = sum(p.numel() for p in self.model.parameters())
        inputs, targets = (  # the global batch; each rank steps on its share
            torch.from_numpy(sharding.rank_slice(a, self.rank, self.world)).to(self.device)
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

        self.precision_policy = set_matmul_policy(torch, strategy.matmul)
        self.forward = torch.compile(self.model) if strategy.compile else self.model
        if strategy.sharding != "none":  # self.model stays the bare module (FSDP2: sharded)
            self.forward = sharding.wrap(self.model, strategy.sharding, self.device)
        if strategy.mode == "infer":
            self.model.eval()
            self.optimizer = None
        else:
            self.model.train()
            self.optimizer = module.make_optimizer(self.model.parameters())
            if strategy.sharding == "zero1":
                self.optimizer = sharding.zero_optimizer(self.optimizer)
        self._advice_setup()

    # -- the advice strategies: autograd left on, two models, host data, hygiene, lengths ------
    def _advice_setup(self) -> None:
        s = self.strategy
        self.phases = PhaseClock()
        self.steps = 0
        self.output: Any = None  # infer-grad: the last output, held as a loop variable holds it
        self.on_phase: Callable[[str], None] | None = None  # tests watch the two-model phases
        self._built: weakref.WeakSet = weakref.WeakSet([self.model])  # to count those alive
        self.models = [self.model]
        self.one_model_bytes = module_bytes(self.model)
        if s.models == "two-resident":
            self.models.append(self.inference_model(model_seeds(self.spec.seed)[1]))
        elif s.models == "two-sequential":  # nothing resident between steps
            self.models, self.model, self.forward = [], None, None
            gc.collect()
        self.host_batch = None
        if s.data == "host":  # as a DataLoader with pin_memory=True hands it over
            pin = self.device.type == "cuda"
            self.host_batch = tuple(
                t.cpu().pin_memory() if pin else t.cpu() for t in (self.inputs, self.targets)
            )

    def inference_model(self, seed: int) -> Any:
        """An independently initialised copy of the workload's model, ready for inference."""
        self.torch.manual_seed(seed)
        model = self.module.build(self.spec.size.inputs, **model_options(self.spec))
        model.to(self.device)
        if self.strategy.precision == "half":
            model.half()
        self._built.add(model.eval())
        return model

    def alive_parameter_bytes(self) -> int:
        """Parameter bytes of every model this session built that is still alive."""
        return sum(module_bytes(m) for m in list(self._built))

    def _phase(self, name: str) -> None:
        if self.on_phase is not None:
            self.on_phase(name)

    def release(self) -> None:
        """What users call to give memory back: the collector, and the CUDA cache's release."""
        gc.collect()
        if self.device.type == "cuda":
            self.torch.cuda.empty_cache()

    def _transfer(self) -> None:
        """The host batch copied to the device, synchronized (the previous copy dropped
        first, as rebinding a loop variable drops it)."""
        self.inputs = self.targets = None
        with self.phases.timed(TRANSFER):
            x, y = (t.to(self.device, non_blocking=True) for t in self.host_batch)
            self._sync()
        self.inputs, self.targets = x, y

    def _infer_sequential(self) -> None:
        for i, seed in enumerate(model_seeds(self.spec.seed)):
            model = self.inference_model(seed)
            self._phase(f"built model {i}")
            with self.torch.inference_mode(), self.autocast:
                model(self.inputs)
            self._sync()
            del model
            self.release()
            self._phase(f"freed model {i}")

    def _infer_lengths(self) -> None:
        seq_len = self.inputs.shape[1]
        for n in lengths_for_step(self.steps, seq_len, self.spec.seed):
            with self.torch.inference_mode(), self.autocast:
                self.forward(self.inputs[:, :n])

    def step_phases(self) -> dict[str, float]:
        return dict(self.phases.last)

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
            self._mark(marks.FORWARD)
            with self.autocast:
                loss = self.loss_fn(self.forward(x), y) / k
            self._mark(marks.BACKWARD)
            (self.scaler.scale(loss) if self.scaler else loss).backward()
            total += loss.detach()
        return total

    def gradients(self, train_bn: bool = True) -> dict[str, np.ndarray]:
        """Session.gradients. With loss scaling, a step whose scaled gradients overflow is
        skipped and the scale lowered, as GradScaler.step does in training; the first finite
        gradients are returned."""
        norms = [
            m
            for m in self.model.modules()
            if isinstance(m, self.torch.nn.modules.batchnorm._BatchNorm)
        ]
        training = [m.training for m in norms]
        for m in norms if not train_bn else []:
            m.eval()
        try:
            grads = self._finite_gradients()
        finally:
            for m, was in zip(norms, training, strict=True):
                m.train(was)
        return {n: g.detach().double().cpu().numpy() for n, g in grads.items()}

    def _finite_gradients(self) -> dict[str, Any]:
        for _ in range(MAX_SCALE_REDUCTIONS):
            self.optimizer.zero_grad(set_to_none=True)
            self.accumulate_gradients()
            grads = {n: p.grad for n, p in self.model.named_parameters()}
            if not self.scaler:
                return grads
            self.scaler.unscale_(self.optimizer)
            if all(bool(self.torch.isfinite(g).all()) for g in grads.values()):
                return grads
            self.scaler.update()  # records the overflow: the next try uses a lower scale
        raise RuntimeError(f"gradients still overflow after {MAX_SCALE_REDUCTIONS} reductions")

    def logits(self) -> np.ndarray:
        torch, training = self.torch, self.model.training
        self.model.eval()
        with torch.no_grad(), self.autocast:
            out = self.model(self.inputs)
        self.model.train(training)
        return out.float().cpu().numpy()

    def step(self) -> None:
        torch = self.torch
        s = self.strategy
        self.phases.start_step()
        if self.host_batch is not None:
            self._transfer()
        if s.mode == "infer" and s.eval_autograd:
            with self.autocast:  # no inference_mode: autograd records the forward
                self.output = self.forward(self.inputs)
        elif s.models == "two-sequential":
            self._infer_sequential()
        elif s.lengths == "varying":
            self._infer_lengths()
        elif s.mode == "infer":
            with torch.inference_mode(), self.autocast:
                for forward in (self.forward, *self.models[1:]):  # two-resident: both
                    forward(self.inputs)
        else:
            self.optimizer.zero_grad(set_to_none=True)
            self.accumulate_gradients()
            self._mark(marks.OPTIMIZER)
            if self.scaler:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
        self._sync()
        self.steps += 1
        if hygiene_due(self.steps, s.hygiene_every):
            with self.phases.timed(COLLECTOR):
                self.release()

    def trace_step(self, prefix: Path) -> dict[str, str]:
        """On CUDA torch's memory snapshot (a pickle pytorch.org/memory_viz opens); on a CPU
        its profiler's memory timeline (HTML, categories of tensors over the step)."""
        torch = self.torch
        if self.device.type == "cuda":
            path = prefix.with_name(prefix.name + ".cuda-memory-snapshot.pickle")
            torch.cuda.memory._record_memory_history(max_entries=200_000)
            try:
                self.step()
                torch.cuda.memory._dump_snapshot(str(path))
            finally:
                torch.cuda.memory._record_memory_history(enabled=None)
            return {"torch CUDA memory snapshot of one step (pytorch.org/memory_viz)": path.name}
        from torch.profiler import ProfilerActivity, profile

        with profile(
            activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
            with_stack=True,
        ) as prof:  # fmt: skip
            self.step()
        path = prefix.with_name(prefix.name + ".memory-timeline.html")
        prof.export_memory_timeline(str(path), device="cpu")
        return {"torch profiler's memory timeline of one step, by category (HTML)": path.name}

    def _mark(self, name: str) -> None:
        """A step part's start on the memory timeline, where CPU kernels run synchronously
        (on CUDA a mark between calls would time their launch, not their work)."""
        if self.device.type == "cpu":
            marks.mark(name)

    def marked_step_phases(self) -> str:
        if self.strategy.mode == "infer":
            return "the step as one phase: an inference step is its forward"
        if self.device.type != "cpu":
            return (
                "the step as one phase: CUDA kernels run asynchronously, so a mark between "
                "calls would time their launch, not their work"
            )
        return "forward, backward and optimizer marked (CPU kernels run as they are called)"

    def all_ranks(self, flag: bool) -> bool:
        return sharding.all_ranks(self.torch, flag, self.device) if self.world > 1 else flag

    def full_parameters(self) -> dict[str, Any]:
        """Every parameter whole (gathered where sharded: a collective on every rank)."""
        return sharding.full_parameters(self.model)

    # -- counters ------------------------------------------------------------------------
    def reset_peaks(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def memory(self) -> dict[str, float]:
        if self.device.type != "cuda":
            return {}  # torch keeps no allocator statistics for CPU tensors
        cuda = self.torch.cuda
        cached = cuda.memory_reserved(self.device) - cuda.memory_allocated(self.device)
        return {
            "peak_device_allocated_bytes": float(cuda.max_memory_allocated(self.device)),
            "peak_device_reserved_bytes": float(cuda.max_memory_reserved(self.device)),
            "device_reserved_minus_allocated_bytes": float(cached),
        }

    def static_metrics(self) -> dict[str, float]:
        """Sizes read off the live tensors after the measured steps."""
        # every resident model (two-models-sequential holds none between steps)
        # this rank's shards where the strategy shards (DTensor.to_local)
        params = [sharding.local(p) for m in self.models for p in m.parameters()]
        grads = [
            sharding.local(p.grad)
            for m in self.models
            for p in m.parameters()
            if p.grad is not None
        ]
        param_bytes = sum(p.numel() * p.element_size() for p in params)
        grad_bytes = sum(g.numel() * g.element_size() for g in grads)
        state_bytes = 0
        if self.optimizer is not None:
            for state in sharding.optimizer_state(self.optimizer).values():
                state_bytes += sum(
                    sharding.local(t).numel() * t.element_size()
                    for t in state.values()
                    if isinstance(t, self.torch.Tensor) and t.dim() > 0
                )
        out = {
            "trainable_parameters": float(self.trainable_parameters),
            "parameter_bytes": float(param_bytes),
            "gradient_bytes": float(grad_bytes),
            "optimizer_state_bytes": float(state_bytes),
            # params + grads + optimizer state: what no strategy but sharding can remove
            "analytic_floor_bytes": float(param_bytes + grad_bytes + state_bytes),
        }
        if self.world > 1:
            out["model_state_bytes"] = out["analytic_floor_bytes"]
        return out

    def notes(self) -> dict[str, object]:
        s = self.strategy
        notes: dict[str, object] = {"mode": s.mode, "device": str(self.device)}
        notes.update(self.precision_policy)
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
        if s.sharding != "none":
            notes["sharding"] = sharding.HOW[s.sharding]
            notes["rank"], notes["world_size"] = self.rank, self.world
            notes["rank_batch"] = self.spec.batch_size // self.world
            if self.module.HAS_BATCHNORM:
                notes["batchnorm"] = "each rank's statistics over its own batch (no SyncBatchNorm)"
        if s.compile:
            notes["compile"] = (
                "torch.compile(model), default mode, cold cache; the first step includes it"
            )
        notes.update(advice_notes(s, self.device.type))
        return notes


def module_bytes(model: Any) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters()) if model else 0


def advice_notes(s: Strategy, device: str) -> dict[str, object]:
    """What the advice strategies did (autograd left on, two models, host data, hygiene)."""
    notes: dict[str, object] = {}
    if s.eval_autograd:
        notes["autograd"] = (
            "model.eval() without no_grad/inference_mode; each step's output (and the graph "
            "behind it) is held until the next step's forward has run, as a loop variable is"
        )
    if s.models != "one":
        notes["models"] = TWO_MODELS[s.models]
    if s.data == "host":
        notes["data"] = (
            "pinned host batch, .to(device, non_blocking=True) and synchronize each step"
            if device == "cuda"
            else "the batch is in host memory already: .to('cpu') returns it, no copy"
        )
    if s.hygiene_every:
        release = "torch.cuda.empty_cache()" if device == "cuda" else "(no device cache on CPU)"
        notes["hygiene"] = f"gc.collect() and {release} after every {s.hygiene_every} steps"
    if s.lengths == "varying":
        notes["lengths"] = (
            "tokens[:, :n], n from a seeded schedule of 8 lengths; the first step runs each once"
        )
    return notes


TWO_MODELS = {
    "two-resident": "two models (seeds 0 and 101) built at setup; each step runs both",
    "two-sequential": "each step builds model 0, runs it, deletes it, gc.collect() and "
    "empty_cache() on CUDA, then the same for model 1: one model alive at a time",
}


JITTOR_LEVER = (
    "a Jittor allocator lever (use_cuda_managed_allocator, JT_SAVE_MEM); PyTorch's caching "
    "allocator has no such mode"
)


class TorchBackend(Backend):
    name = "torch"
    baseline = (
        "fp32 training step in eager mode: forward, loss, backward, optimizer step; on GPUs "
        "float32 in full (allow_tf32 off for matmuls and cuDNN, NVIDIA_TF32_OVERRIDE=0)"
    )
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
        "matmul": {
            "tf32": Implemented(
                "torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 = True",
                ("cuda",),
                TF32_ELSEWHERE,
            )
        },
        "eval_autograd": {
            True: Implemented(
                "model.eval(), forward outside no_grad/inference_mode; the "
                "output held until the next step"
            )
        },
        "models": {
            "two-resident": Implemented("two models built, both run each step"),
            "two-sequential": Implemented(
                "build, run, del, gc.collect() + torch.cuda.empty_cache(), for each model in turn"
            ),
        },
        "data": {
            "host": Implemented(
                "host batch (pinned on CUDA), .to(device, non_blocking=True) + synchronize, "
                "timed apart"
            )
        },
        "hygiene_every": {
            ANY: Implemented("gc.collect() + torch.cuda.empty_cache() every k steps, timed apart")
        },
        "lengths": {"varying": Implemented("tokens[:, :n] with n from the seeded schedule")},
        "sharding": sharding.SUPPORT,
    }

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
