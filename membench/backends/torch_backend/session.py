"""The PyTorch session: a built model, optimizer and batch; the step's primitives (the step
itself is membench.backends.session's template) and the counters the worker reads."""

from __future__ import annotations

import gc
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from membench.backends import Session, model_module, model_options
from membench.backends.torch_backend import sharding
from membench.backends.torch_backend.support import SUPPORT
from membench.instruments import marks

if TYPE_CHECKING:
    import numpy as np

MAX_SCALE_REDUCTIONS = 32  # GradScaler halves its scale per overflow: 2**16 down to 2**-16
_AUTOCAST_DTYPES = {"amp-bf16": "bfloat16", "amp-fp16": "float16"}


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


class TorchSession(Session):
    support = SUPPORT

    def build(self) -> None:
        import torch

        self.torch = torch
        spec, strategy = self.spec, self.strategy
        self.device = torch.device(self.device)
        self.rank, self.world = 0, 1
        if spec.world_size > 1:  # a rank of a data-parallel cell: its process group, its device
            self.rank, self.world, self.device = sharding.init_process_group(torch)
        self.module = module = model_module(spec.workload, "torch")
        self.loss_fn = module.loss_fn

        self.model = self.new_model(spec.seed, checkpoint=strategy.checkpoint)
        self.trainable_parameters = sum(p.numel() for p in self.model.parameters())
        inputs, targets = (  # the global batch; each rank steps on its share
            torch.from_numpy(sharding.rank_slice(a, self.rank, self.world)).to(self.device)
            for a in module.synthetic_batch(spec.batch_size, spec.size.inputs, spec.seed)
        )
        if strategy.precision == "half" and inputs.is_floating_point():  # token ids stay integers
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
        self.host_batch = None
        if self.host_data:  # as a DataLoader with pin_memory=True hands it over
            pin = self.device.type == "cuda"
            self.host_batch = tuple(
                t.cpu().pin_memory() if pin else t.cpu() for t in (self.inputs, self.targets)
            )

    def new_model(self, seed: int, checkpoint: bool = False) -> Any:
        self.torch.manual_seed(seed)
        model = self.module.build(
            self.spec.size.inputs, checkpoint=checkpoint, **model_options(self.spec)
        )
        model.to(self.device)
        if self.strategy.precision == "half":
            model.half()
        return model

    def drop_model(self) -> None:
        """Two models in turn: the model and its forward dropped, the collector run."""
        self.model = self.forward = None
        gc.collect()

    def release(self) -> None:
        """What users call to give memory back: the collector, and the CUDA cache's release."""
        gc.collect()
        if self.device.type == "cuda":
            self.torch.cuda.empty_cache()

    # -- the step's primitives (Session.step is the template) ----------------------------
    def drop_batch(self) -> None:
        self.inputs = self.targets = None

    def copy_batch(self) -> None:
        x, y = (t.to(self.device, non_blocking=True) for t in self.host_batch)
        self.sync()
        self.inputs, self.targets = x, y

    def infer_with(self, model: Any) -> None:
        with self.torch.inference_mode(), self.autocast:
            model(self.inputs)
        self.sync()

    def sequence_length(self) -> int:
        return self.inputs.shape[1]

    def infer_length(self, length: int) -> None:
        with self.torch.inference_mode(), self.autocast:
            self.forward(self.inputs[:, :length])

    def infer_with_autograd(self) -> None:
        with self.autocast:  # no inference_mode: autograd records the forward
            self.output = self.forward(self.inputs)

    def infer(self) -> None:
        with self.torch.inference_mode(), self.autocast:
            for forward in (self.forward, *self.models[1:]):  # two-resident: both
                forward(self.inputs)

    def train_step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.accumulate_gradients()
        self._mark(marks.OPTIMIZER)
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def sync(self) -> None:
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

    def model_sizes(self) -> dict[str, float]:
        """Sizes read off the live tensors."""
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
        }
        if self.world > 1:  # this rank's share of the model state
            out["model_state_bytes"] = float(param_bytes + grad_bytes + state_bytes)
        return out

    def framework_notes(self) -> dict[str, object]:
        s = self.strategy
        notes: dict[str, object] = {"device": str(self.device)}
        notes.update(self.precision_policy)
        if s.precision in _AUTOCAST_DTYPES:
            notes["autocast_dtype"] = _AUTOCAST_DTYPES[s.precision]
            notes["grad_scaler"] = self.scaler is not None
        if s.precision == "half":
            notes["model_dtype"] = "float16"
        if s.checkpoint:
            notes["checkpoint"] = self.module.CHECKPOINT_UNIT
        if hasattr(self.module, "ATTENTION"):
            notes["attention"] = self.module.ATTENTION[s.attention]
        if s.sharding != "none":
            notes["sharding"] = self.how("sharding")
            notes["rank"], notes["world_size"] = self.rank, self.world
            notes["rank_batch"] = self.spec.batch_size // self.world
            if self.module.HAS_BATCHNORM:
                notes["batchnorm"] = "each rank's statistics over its own batch (no SyncBatchNorm)"
        if s.compile:
            notes["compile"] = self.how("compile")
        return notes
