"""The PyTorch session: a built model, optimizer and batch, and the step's primitives (the step
itself is membench.backends.session's template; what the worker reads is readings.py)."""

from __future__ import annotations

import gc
from contextlib import nullcontext
from typing import Any

from membench.backends import Session, model_module, model_options
from membench.backends.torch_backend import sharding
from membench.backends.torch_backend.readings import TorchReadings
from membench.backends.torch_backend.support import AUTOCAST_DTYPES, SUPPORT
from membench.instruments import marks
from membench.registry import workload


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


def memory_format(torch: Any, spec: Any) -> Any:
    """torch's channels-last format for the workload's images or volumes, None for the
    contiguous default."""
    if spec.strategy.memory_format != "channels-last":
        return None
    volumes = workload(spec.workload).convolution_dims == 3  # NCDHW
    return torch.channels_last_3d if volumes else torch.channels_last


class TorchSession(Session):
    support = SUPPORT
    readings_class = TorchReadings

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
        if (layout := memory_format(torch, spec)) is not None:
            inputs = inputs.contiguous(memory_format=layout)
        self.batches = [(inputs, targets)]  # whole: accumulation chunks it each step

        self.autocast = nullcontext()
        self.scaler = None
        if strategy.precision in AUTOCAST_DTYPES:
            dtype = getattr(torch, AUTOCAST_DTYPES[strategy.precision])
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
                t.cpu().pin_memory() if pin else t.cpu() for t in self.batches[0]
            )

    def new_model(self, seed: int, checkpoint: bool = False) -> Any:
        self.torch.manual_seed(seed)
        model = self.module.build(
            self.spec.size.inputs, checkpoint=checkpoint, **model_options(self.spec)
        )
        model.to(self.device)
        if (layout := memory_format(self.torch, self.spec)) is not None:
            model.to(memory_format=layout)
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
    def copy_batch(self) -> list[Any]:
        x, y = (t.to(self.device, non_blocking=True) for t in self.host_batch)
        self.sync()
        return [(x, y)]

    def infer(self, model: Any = None, length: int | None = None) -> None:
        x = self.batches[0][0]
        forward = self.forward if model is None else model
        with self.torch.inference_mode(), self.autocast:
            forward(x if length is None else x[:, :length])

    def infer_with_autograd(self) -> None:
        with self.autocast:  # no inference_mode: autograd records the forward
            self.output = self.forward(self.batches[0][0])

    def train_step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        backward(self)
        mark(self, marks.OPTIMIZER)
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)


def backward(s: TorchSession) -> Any:
    """Forward and backward over the strategy's micro-batches into the parameters' gradients
    (train_step's, and the parity tests'); returns the loss.

    Each micro-batch loss is divided by k, so the summed gradients are those of the mean loss
    over the whole batch.
    """
    k = s.strategy.accumulate
    inputs, targets = s.batches[0]
    total = s.torch.zeros((), device=s.device)
    for x, y in zip(inputs.chunk(k), targets.chunk(k), strict=True):
        mark(s, marks.FORWARD)
        with s.autocast:
            loss = s.loss_fn(s.forward(x), y) / k
        mark(s, marks.BACKWARD)
        (s.scaler.scale(loss) if s.scaler else loss).backward()
        total += loss.detach()
    return total


def mark(s: TorchSession, name: str) -> None:
    """A step part's start on the memory timeline, where CPU kernels run synchronously (on
    CUDA a mark between calls would time their launch, not their work: readings.py says so)."""
    if s.device.type == "cpu":
        marks.mark(name)
