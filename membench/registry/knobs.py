"""The knobs a strategy sets: their values (one type each) and their defaults, the baseline."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

Precision = Literal["fp32", "amp-bf16", "amp-fp16", "half"]
Mode = Literal["train", "infer"]
Allocator = Literal[
    "default", "expandable-segments", "cuda-managed", "host-swap", "fixed-mmap-threshold"
]
# Allocators that page device memory out to the host (Jittor's levers): past the card they
# slow down instead of failing.
SWAPPING_ALLOCATORS = ("cuda-managed", "host-swap")
# fixed-mmap-threshold: the host's C allocator, glibc, with its mmap threshold fixed
# (membench.instruments.host_malloc), a CPU lever set the same way under every framework
Attention = Literal["plain", "fused"]
# float32 matmuls and convolutions on GPUs: fp32 in full, or TF32 tensor cores (10-bit mantissa)
Matmul = Literal["fp32", "tf32"]
# one model; two independently initialised copies both resident; or built and freed in turn
Models = Literal["one", "two-resident", "two-sequential"]
Data = Literal["device", "host"]  # where the batch lives between steps
# How image tensors are laid out in memory: contiguous (NCHW / NCDHW, torch's default) or
# channels-last (NHWC / NDHWC: the layout cuDNN's tensor-core convolutions work in, as NVIDIA's
# and timm's ResNet-50 recipes train); a layout only, the function is the same
MemoryFormat = Literal["contiguous", "channels-last"]
Lengths = Literal["fixed", "varying"]  # a sequence length per step from a seeded schedule
# How model state is spread over the ranks of a data-parallel cell (ZeRO's stages): none (one
# rank), replicated (DDP; JAX's batch-sharded Mesh), optimizer state sharded (ZeRO-1), and
# gradients too (ZeRO-2), and parameters too (ZeRO-3: FSDP). The global batch is split evenly.
Sharding = Literal["none", "replicated", "zero1", "zero2", "zero3"]
# How k micro-batches run: loop = one framework call (or lazy graph) per micro-batch, as each
# framework's users accumulate; scan = an in-graph loop inside one compiled step (JAX's
# lax.scan); sync = the loop, each micro-batch executed before the next is built (Jittor's
# lazy graph otherwise holds every micro-batch's activations until the step's sync).
AccumulateMode = Literal["loop", "scan", "sync"]


@dataclass(frozen=True)
class Strategy:
    """A named set of knobs. Every strategy computes the baseline's function."""

    name: str
    description: str
    precision: Precision = "fp32"
    checkpoint: bool = False
    accumulate: int = 1  # micro-batches per step, same global batch
    accumulate_mode: AccumulateMode = "loop"  # how the micro-batches run (when accumulate > 1)
    mode: Mode = "train"
    compile: bool = False
    allocator: Allocator = "default"
    fusion: bool = True  # False: the framework's operator fusion turned off
    # plain: softmax(QK^T)V written out; fused: the framework's fused attention kernel
    attention: Attention = "plain"
    # fp32: float32 arithmetic in full in every framework (set explicitly: their GPU defaults
    # differ); tf32: TF32 tensor cores for float32 matmuls and convolutions
    matmul: Matmul = "fp32"
    # inference with autograd left on: the forward outside no_grad (the forgotten context)
    eval_autograd: bool = False
    models: Models = "one"
    data: Data = "device"
    hygiene_every: int = 0  # collector + cache release every k steps (0: never)
    lengths: Lengths = "fixed"
    sharding: Sharding = "none"
    memory_format: MemoryFormat = "contiguous"

    def __post_init__(self) -> None:
        if self.mode != "infer" and self.inference_knobs():
            raise ValueError(f"strategy {self.name}: {self.inference_knobs()} apply to inference")
        if self.sharding != "none" and self.mode != "train":
            raise ValueError(f"strategy {self.name}: sharding applies to training")
        if self.hygiene_every < 0:
            raise ValueError(f"strategy {self.name}: hygiene_every must be >= 0")

    def inference_knobs(self) -> list[str]:
        """The knobs set here that only mean something for an inference step."""
        changed = {
            "eval_autograd": self.eval_autograd,
            "models": self.models != "one",
            "lengths": self.lengths != "fixed",
        }
        return [k for k, v in changed.items() if v]

    def knobs(self) -> dict[str, object]:
        """Every knob and its value: each field but the name and description."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_KNOBS}


_NOT_KNOBS = ("name", "description")


def knob_defaults(kind: type[Strategy] | None = None) -> dict[str, object]:
    """Each knob's default: the baseline's value, which every backend runs."""
    return {f.name: f.default for f in fields(kind or Strategy) if f.name not in _NOT_KNOBS}
