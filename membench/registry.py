"""The one list of workloads, strategies, presets and frameworks.

Everything the suite can measure is named here. Nothing in this module imports a
framework: backends are referenced by module path and imported only by the worker.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field, fields
from typing import Literal

Precision = Literal["fp32", "amp-bf16", "amp-fp16", "half"]
Mode = Literal["train", "infer"]
Allocator = Literal["default", "expandable-segments", "cuda-managed", "host-swap"]
# Allocators that page device memory out to the host (Jittor's levers): past the card they
# slow down instead of failing.
SWAPPING_ALLOCATORS = ("cuda-managed", "host-swap")
Attention = Literal["plain", "fused"]
# float32 matmuls and convolutions on GPUs: fp32 in full, or TF32 tensor cores (10-bit mantissa)
Matmul = Literal["fp32", "tf32"]
# one model; two independently initialised copies both resident; or built and freed in turn
Models = Literal["one", "two-resident", "two-sequential"]
Data = Literal["device", "host"]  # where the batch lives between steps
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


class UnknownNameError(ValueError):
    """A name that is not in a registry; the message lists the valid ones."""

    def __init__(self, kind: str, name: str, valid: list[str]):
        self.kind, self.name, self.valid = kind, name, valid
        super().__init__(f"unknown {kind} {name!r}; valid {kind} names: {', '.join(valid)}")


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    # Per-framework model module: models/<workload>/<framework>_impl.py
    model_modules: dict[str, str]
    attention: bool = False  # has self-attention, so the attention knob applies
    sequence: bool = False  # takes token sequences, so the lengths knob applies


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


@dataclass(frozen=True)
class WorkloadSize:
    """Input sizes and batch grid of one workload in one preset (never the architecture)."""

    batch_sizes: tuple[int, ...]
    inputs: dict[str, int] = field(default_factory=dict)
    # this workload's limit per cell where it differs from the preset's (cells that run on
    # slow reference kernels end as `timeout` instead of holding the run for many minutes)
    cell_timeout_seconds: float | None = None


@dataclass(frozen=True)
class LeftOut:
    """Cells a preset does not measure, and why: another preset measures them. An empty
    tuple matches every name."""

    frameworks: tuple[str, ...]
    workloads: tuple[str, ...]
    strategies: tuple[str, ...]
    reason: str

    def covers(self, framework: str, workload: str, strategy: str) -> bool:
        return all(
            not names or name in names
            for names, name in (
                (self.frameworks, framework), (self.workloads, workload),
                (self.strategies, strategy),
            )
        )  # fmt: skip


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    sizes: dict[str, WorkloadSize]
    warmup_min_steps: int
    warmup_max_seconds: float
    warmup_tolerance: float  # relative change between consecutive steps that counts as stable
    measure_steps: int
    cell_timeout_seconds: float
    # The strategies measured when none are selected (empty: all of them). A probe preset
    # measures one question, e.g. eval memory over a fine batch grid.
    strategies: tuple[str, ...] = ()
    # Meant for a GPU: a framework that would run on another device ends `error` (the device
    # guard), so that a CPU figure never stands in a GPU table.
    gpu: bool = False
    # Ranks of a cell whose strategy shards (--world-size overrides); other cells run on one.
    world_size: int = 1
    # Cells this preset leaves to another (minutes each where the preset promises seconds).
    left_out: tuple[LeftOut, ...] = ()
    # Workloads in order of preference: when set, each framework runs each strategy once, on
    # the first selected workload that runs it (the baseline on every workload); the others
    # are left to a preset that runs them all. Empty: every strategy on every workload.
    once_per_strategy: tuple[str, ...] = ()
    # The memory budget (bytes) of each workload's capacity searches, which `membench bench`
    # runs after the cells for the decision tables; a workload without one is not searched.
    capacity_budgets: dict[str, float] = field(default_factory=dict)
    capacity_max_batch: int = 65_536  # the searches' largest batch
    # Searches the preset leaves out although it measures their cells (a search probes far
    # larger batches than the cells' own)
    capacity_left_out: tuple[LeftOut, ...] = ()

    def leaves_out(self, framework: str, workload: str, strategy: str) -> str | None:
        """Why this preset does not measure a cell (None: it does)."""
        for rule in self.left_out:
            if rule.covers(framework, workload, strategy):
                return rule.reason
        return None

    def leaves_out_of_capacity(self, framework: str, workload: str, strategy: str) -> str | None:
        """Why this preset does not search a combination's capacity (None: it does)."""
        for rule in self.capacity_left_out:
            if rule.covers(framework, workload, strategy):
                return rule.reason
        return self.leaves_out(framework, workload, strategy)

    def size(self, workload: str) -> WorkloadSize:
        if workload not in self.sizes:
            raise UnknownNameError(f"workload in preset {self.name}", workload, list(self.sizes))
        return self.sizes[workload]

    def cell_timeout(self, workload: str) -> float:
        return self.size(workload).cell_timeout_seconds or self.cell_timeout_seconds


@dataclass(frozen=True)
class Framework:
    name: str
    description: str
    backend: str  # "module:Class", imported lazily by the worker
    distribution: str  # pip distribution name, to test availability without importing


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload(
            "resnet50",
            "ResNet-50 v1.5 image classifier (25,557,032 parameters), cross-entropy, SGD+momentum",
            {
                "torch": "models.resnet50.torch_impl",
                "jax": "models.resnet50.flax_impl",
                "jittor": "models.resnet50.jittor_impl",
            },
        ),
        Workload(
            "unet3d",
            "3D U-Net (Cicek et al. 2016), 4 levels, 1 input channel, 3 classes "
            "(19,071,459 parameters), soft-Dice + cross-entropy, Adam",
            {
                "torch": "models.unet3d.torch_impl",
                "jax": "models.unet3d.flax_impl",
                "jittor": "models.unet3d.jittor_impl",
            },
        ),
        Workload(
            "transformer",
            "GPT-2-style decoder (pre-LN, causal attention, tied embeddings; GPT-2 small "
            "124,439,808 parameters where the preset does not shrink it), next-token loss, AdamW",
            {
                "torch": "models.transformer.torch_impl",
                "jax": "models.transformer.flax_impl",
                "jittor": "models.transformer.jittor_impl",
            },
            attention=True,
            sequence=True,
        ),
    ]
}

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in [
        Strategy("baseline", "fp32 training step"),
        Strategy("amp-bf16", "automatic mixed precision, bfloat16 compute", precision="amp-bf16"),
        Strategy(
            "amp-fp16",
            "automatic mixed precision, float16 compute with dynamic loss scaling",
            precision="amp-fp16",
        ),
        Strategy(
            "checkpoint",
            "activation checkpointing per block (residual block, U-Net level, Transformer block)",
            checkpoint=True,
        ),
        Strategy(
            "amp-bf16-checkpoint",
            "bfloat16 mixed precision and activation checkpointing",
            precision="amp-bf16",
            checkpoint=True,
        ),
        Strategy("accumulate-2", "2 micro-batches per step, same global batch", accumulate=2),
        Strategy("accumulate-4", "4 micro-batches per step, same global batch", accumulate=4),
        Strategy(
            "accumulate-2-scan",
            "2 micro-batches as an in-graph loop inside one compiled step",
            accumulate=2,
            accumulate_mode="scan",
        ),
        Strategy(
            "accumulate-4-scan",
            "4 micro-batches as an in-graph loop inside one compiled step",
            accumulate=4,
            accumulate_mode="scan",
        ),
        Strategy(
            "accumulate-2-sync",
            "2 micro-batches, each executed before the next is built (a sync after each)",
            accumulate=2,
            accumulate_mode="sync",
        ),
        Strategy(
            "accumulate-4-sync",
            "4 micro-batches, each executed before the next is built (a sync after each)",
            accumulate=4,
            accumulate_mode="sync",
        ),
        Strategy("infer", "inference: eval mode, no autograd", mode="infer"),
        Strategy(
            "infer-half", "inference with the model cast to float16", mode="infer", precision="half"
        ),
        Strategy("compile", "graph compilation of the training step", compile=True),
        Strategy(
            "expandable-segments",
            "fp32 training with the expandable-segments device allocator",
            allocator="expandable-segments",
        ),
        Strategy(
            "no-fuse",
            "fp32 training with operator fusion turned off (Jittor's no_fuse=1)",
            fusion=False,
        ),
        Strategy(
            "managed-allocator",
            "fp32 training on CUDA unified memory (Jittor's use_cuda_managed_allocator=1)",
            allocator="cuda-managed",
        ),
        Strategy(
            "save-mem",
            "fp32 training, device memory swapped to the host past a limit (Jittor's JT_SAVE_MEM)",
            allocator="host-swap",
        ),
        Strategy(
            "fused-attention",
            "fp32 training with the framework's fused attention kernel (baseline: plain)",
            attention="fused",
        ),
        Strategy(
            "fused-attention-bf16",
            "bfloat16 mixed precision with the fused attention kernel (baseline: amp-bf16), "
            "where cuDNN's and PyTorch's flash kernels apply",
            precision="amp-bf16",
            attention="fused",
        ),
        Strategy(
            "tf32",
            "fp32 training with TF32 tensor cores for float32 matmuls and convolutions (GPUs)",
            matmul="tf32",
        ),
        Strategy(
            "infer-grad",
            "inference in eval mode with autograd left on (no_grad forgotten)",
            mode="infer",
            eval_autograd=True,
        ),
        Strategy(
            "two-models-resident",
            "inference with two independently initialised models, both resident, both run",
            mode="infer",
            models="two-resident",
        ),
        Strategy(
            "two-models-sequential",
            "inference with two models in turn: build, run, free and release cached memory",
            mode="infer",
            models="two-sequential",
        ),
        Strategy(
            "host-data", "fp32 training, the batch copied from host memory every step", data="host"
        ),
        Strategy(
            "hygiene-2",
            "host-data training with the collector and cache release every 2 steps",
            data="host",
            hygiene_every=2,
        ),
        Strategy(
            "infer-varlen",
            "inference whose sequence length varies per step over a seeded schedule",
            mode="infer",
            lengths="varying",
        ),
        Strategy(
            "ddp",
            "data parallel over W ranks, model state replicated, gradients all-reduced",
            sharding="replicated",
        ),
        Strategy(
            "zero1",
            "data parallel, optimizer state sharded over the ranks (ZeRO-1)",
            sharding="zero1",
        ),
        Strategy(
            "fsdp-zero2",
            "data parallel, gradients and optimizer state sharded, parameters gathered for the "
            "whole step (ZeRO-2)",
            sharding="zero2",
        ),
        Strategy(
            "fsdp",
            "fully sharded data parallel: parameters, gradients and optimizer state sharded, "
            "each layer gathered when used (ZeRO-3)",
            sharding="zero3",
        ),
    ]
}
SHARDING_STRATEGIES = tuple(n for n, s in STRATEGIES.items() if s.sharding != "none")


def world_size_of(strategy: Strategy, preset: Preset, override: int | None = None) -> int:
    """A cell's ranks: the preset's (or the override) where the strategy shards, else one."""
    return (override or preset.world_size) if strategy.sharding != "none" else 1


# Batch grids of the eval probes: every step small enough that a dip between neighbours shows.
EVAL_PROBE_CPU = (1, 2, 3, 4, 6, 8, 12, 16)
EVAL_PROBE_GPU = (*range(50, 500, 50), *range(500, 2001, 250))
EVAL_PROBE_QUICK = (150, 200, 300, 500)  # C7: 200 failed, 500 worked (16 GB)
# Transformer configurations: the preset's inputs name the model that ran (GPT-2 small on
# GPUs; CPU presets shrink width, depth, vocabulary and sequence to fit two cores).
GPT2_SMALL = {
    "vocab_size": 50257, "n_positions": 1024, "n_layer": 12, "n_head": 12, "d_model": 768,
    "seq_len": 1024,
}  # fmt: skip
TRANSFORMER_CPU = {
    "vocab_size": 8192, "n_positions": 128, "n_layer": 4, "n_head": 4, "d_model": 256,
    "seq_len": 128,
}  # fmt: skip
# Model state (16 bytes a parameter under AdamW) far above activations at a short sequence:
# 42,013,696 parameters: ~670 MB of state per replica against ~70 MB of activations at batch 4.
TRANSFORMER_SHARD = {
    "vocab_size": 32768, "n_positions": 32, "n_layer": 8, "n_head": 8, "d_model": 512,
    "seq_len": 32,
}  # fmt: skip
TRANSFORMER_TINY = {
    "vocab_size": 512, "n_positions": 32, "n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32,
}  # fmt: skip

# The memory model's calibration cells (membench.calibrate): sizes and batches no other CPU
# preset measures (ResNet-50 at 128x128; the U-Net at batch 1 and 3, the Transformer at 2 and
# 8, where `cpu` runs 2 and 4), so that no judged cell feeds its own prediction.
CALIBRATION_PRESET = "calibrate"
CALIBRATION_STRATEGIES = ("baseline", "infer")

# What the smoke preset leaves to the cpu preset, from the committed cpu runs' cell times.
SMOKE_LEFT_OUT = (
    LeftOut(
        ("jittor",), ("unet3d",), (),
        "Jittor's 3D convolutions run generic kernels on CPUs (90-330 s a cell at 16^3)",
    ),
    LeftOut(
        ("jittor",), (), ("amp-bf16", "amp-fp16", "infer-half", "fused-attention-bf16"),
        "Jittor compiles a float16/bfloat16 CPU kernel per op on first use (80-600 s a cell)",
    ),
    LeftOut(
        ("jittor",), ("resnet50",), ("no-fuse",),
        "unfused convolutions materialise their im2col-like tensors (40-80 s a cell at 64x64)",
    ),
    LeftOut(
        ("torch",), ("unet3d",), ("amp-fp16", "infer-half"),
        "float16 3D convolutions run PyTorch's CPU reference kernels (past 150 s a cell)",
    ),
    LeftOut(
        ("torch",), ("resnet50", "unet3d"), ("compile",),
        "a cold Inductor compile per cell (40-50 s); smoke compiles the Transformer only",
    ),
)  # fmt: skip

# Seconds a cell on two CPU cores (smoke, cpu-quick): one warm-up step at least, three measured.
SHORT_PROTOCOL = {
    "warmup_min_steps": 1, "warmup_max_seconds": 5.0, "warmup_tolerance": 0.25, "measure_steps": 3,
}  # fmt: skip

# The main job on a CPU host (membench bench with no arguments): each workload in every
# framework at small inputs, the core strategies at one batch, then their capacity searches.
QUICK_STRATEGIES = ("baseline", "amp-bf16", "checkpoint", "accumulate-4", "infer")
JITTOR_UNET_SLOW = (
    "Jittor's 3D convolutions run generic kernels on CPUs: 33 s a training step at 16^3 and "
    "batch 2 on two cores (minutes a cell, and a capacity search needs several); at 8^3 its "
    "convolution refuses the 1^3 bottom level (size of var should be larger than kernel_size)"
)
QUICK_LEFT_OUT = (
    LeftOut(
        ("jittor",), (), ("amp-bf16",),
        "Jittor compiles a bfloat16 CPU kernel per op on first use (80-600 s a cell)",
    ),
    LeftOut(("jittor",), ("unet3d",), (), JITTOR_UNET_SLOW),
)  # fmt: skip
QUICK_CAPACITY_LEFT_OUT = (
    LeftOut(
        ("jax",), ("unet3d",), (),
        "JAX's U-Net at 16^3 takes 0.65 s a sample a training step on two cores (42 s at batch "
        "64) and about a minute a probe near its answers: its searches would take 12 of the "
        "main job's 30 minutes; `membench capacity -p cpu-quick -w unet3d -f jax --budget "
        "900MiB` runs them",
    ),
)  # fmt: skip

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset(
            "smoke",
            "seconds per cell on two CPU cores: every strategy each framework runs, once (on "
            "the first of the Transformer, ResNet-50 and U-Net that runs it; the baseline on "
            "each workload it keeps), at small sizes and one batch (4: accumulation splits it "
            "in 2 and 4); cells on slow CPU reference kernels are left to the cpu preset "
            "(membench list says which)",
            {
                "resnet50": WorkloadSize((4,), {"image_size": 64, "num_classes": 1000}),
                "unet3d": WorkloadSize((4,), {"volume": 16, "num_classes": 3}),
                "transformer": WorkloadSize((4,), TRANSFORMER_TINY),
            },
            **SHORT_PROTOCOL,
            cell_timeout_seconds=600,
            left_out=SMOKE_LEFT_OUT,
            # the tiny Transformer's cells are the quickest, the U-Net's the slowest
            once_per_strategy=("transformer", "resnet50", "unet3d"),
        ),
        Preset(
            "cpu",
            "standard input sizes, batch grid sized for a CPU host",
            {
                "resnet50": WorkloadSize((1, 2, 4, 8), {"image_size": 224, "num_classes": 1000}),
                # The U-Net's smallest volume with a 2^3 bottom level. Jittor's generic 3D
                # convolution kernels take over 200 s a training cell on two cores (at 150 s every
                # Jittor U-Net cell ended unmeasured); torch's float16 conv3d runs on slow
                # reference kernels on CPUs: those cells end at the time limit.
                "unet3d": WorkloadSize(
                    (2,), {"volume": 16, "num_classes": 3}, cell_timeout_seconds=420
                ),
                "transformer": WorkloadSize((4,), TRANSFORMER_CPU, cell_timeout_seconds=150),
            },
            warmup_min_steps=2,
            warmup_max_seconds=30.0,
            warmup_tolerance=0.10,
            measure_steps=5,
            cell_timeout_seconds=900,
        ),
        Preset(
            "gpu",
            "standard input sizes, batch grid that reaches out-of-memory on an 80 GB card",
            {
                "resnet50": WorkloadSize(
                    (32, 64, 128, 256, 512, 1024, 2048), {"image_size": 224, "num_classes": 1000}
                ),
                "unet3d": WorkloadSize((1, 2, 4, 8, 16), {"volume": 128, "num_classes": 3}),
                "transformer": WorkloadSize((1, 2, 4, 8, 16, 32, 64), GPT2_SMALL),
            },
            warmup_min_steps=5,
            warmup_max_seconds=60.0,
            warmup_tolerance=0.05,
            measure_steps=20,
            cell_timeout_seconds=900,
            gpu=True,
        ),
        Preset(
            "cpu-quick",
            "the main job on a CPU host, under 30 minutes on two cores: every workload at small "
            "inputs (Jittor's U-Net left to cpu), the core strategies at one batch, then each "
            "one's largest batch within a memory budget per workload (the decision tables)",
            {
                "resnet50": WorkloadSize((4,), {"image_size": 64, "num_classes": 1000}),
                "unet3d": WorkloadSize((4,), {"volume": 16, "num_classes": 3}),
                "transformer": WorkloadSize((4,), TRANSFORMER_CPU),
            },
            **SHORT_PROTOCOL,
            cell_timeout_seconds=300,
            strategies=QUICK_STRATEGIES,
            left_out=QUICK_LEFT_OUT,
            # chosen from 6b5acae's probes so that the training answers fall between 4 and 64
            # (JAX's accumulate-4 needs 911 MiB at batch 4 on ResNet-50); inference, and
            # accumulation on the smaller runtimes, stop at the maximum (64): a lower bound
            capacity_budgets={
                "resnet50": 960 * 2**20,
                "unet3d": 900 * 2**20,
                "transformer": 650 * 2**20,
            },  # fmt: skip
            capacity_max_batch=64,
            capacity_left_out=QUICK_CAPACITY_LEFT_OUT,
        ),
        # One short GPU session's worth (membench/plans.py): two ResNet-50 batches, the U-Net
        # at 128^3 and GPT-2 small, fewer steps than `gpu`; each cell within 5 minutes.
        Preset(
            "gpu-quick",
            "standard input sizes, few batches and steps: the cells the GPU claims need",
            {
                "resnet50": WorkloadSize((64, 256), {"image_size": 224, "num_classes": 1000}),
                "unet3d": WorkloadSize((1, 2), {"volume": 128, "num_classes": 3}),
                "transformer": WorkloadSize((8,), GPT2_SMALL),
            },
            warmup_min_steps=3,
            warmup_max_seconds=20.0,
            warmup_tolerance=0.05,
            measure_steps=10,
            cell_timeout_seconds=300,
            gpu=True,
        ),
        # The eval-mode probe behind claim C7 (Jittor's eval failing at a batch below one that
        # works): inference only, over a batch grid fine enough to show non-monotonic memory.
        Preset(
            "cpu-eval",
            "eval-mode probe: inference over a fine batch grid, CPU host",
            {"resnet50": WorkloadSize(EVAL_PROBE_CPU, {"image_size": 224, "num_classes": 1000})},
            warmup_min_steps=1,
            warmup_max_seconds=20.0,
            warmup_tolerance=0.15,
            measure_steps=3,
            cell_timeout_seconds=600,
            strategies=("infer",),
        ),
        Preset(
            "gpu-eval",
            "eval-mode probe: inference over a fine batch grid up to out-of-memory, GPU",
            {"resnet50": WorkloadSize(EVAL_PROBE_GPU, {"image_size": 224, "num_classes": 1000})},
            warmup_min_steps=2,
            warmup_max_seconds=30.0,
            warmup_tolerance=0.10,
            measure_steps=5,
            cell_timeout_seconds=900,
            strategies=("infer",),
            gpu=True,
        ),
        Preset(
            "gpu-quick-eval",
            "eval-mode probe around claim C7's batches (150 ... 500), GPU",
            {"resnet50": WorkloadSize(EVAL_PROBE_QUICK, {"image_size": 224, "num_classes": 1000})},
            warmup_min_steps=2,
            warmup_max_seconds=15.0,
            warmup_tolerance=0.10,
            measure_steps=5,
            cell_timeout_seconds=300,
            strategies=("infer",),
            gpu=True,
        ),
        Preset(
            "cpu-shard",
            "sharded data parallelism on two CPU cores: a Transformer whose model state "
            "dominates, and ResNet-50; the unsharded baseline beside each sharding at W ranks",
            {
                "transformer": WorkloadSize((4,), TRANSFORMER_SHARD, cell_timeout_seconds=600),
                "resnet50": WorkloadSize((4,), {"image_size": 224, "num_classes": 1000}),
            },
            warmup_min_steps=2,
            warmup_max_seconds=30.0,
            warmup_tolerance=0.10,
            measure_steps=5,
            cell_timeout_seconds=900,
            strategies=("baseline", *SHARDING_STRATEGIES),
            world_size=2,
        ),
        Preset(
            CALIBRATION_PRESET,
            "the memory model's calibration cells: baseline and inference, two batches each",
            {
                "resnet50": WorkloadSize((2, 6), {"image_size": 128, "num_classes": 1000}),
                "unet3d": WorkloadSize((1, 3), {"volume": 16, "num_classes": 3}),
                "transformer": WorkloadSize((2, 8), TRANSFORMER_CPU),
            },
            # memory needs one steady step after the first; speed is not judged here
            warmup_min_steps=1,
            warmup_max_seconds=5.0,
            warmup_tolerance=0.5,
            measure_steps=2,
            cell_timeout_seconds=300,
            strategies=CALIBRATION_STRATEGIES,
        ),
    ]
}

# membench selfcheck: ResNet-50 cells beside plain reference loops (membench/selfcheck.py).
# Its image size is chosen per run; workers read it from the environment, as plugins are.
SELFCHECK_IMAGE_SIZE_ENV = "MEMBENCH_SELFCHECK_IMAGE_SIZE"
SELFCHECK_STRATEGIES = ("baseline", "infer", "accumulate-4")


def selfcheck_preset(image_size: int) -> Preset:
    """The selfcheck's preset: small by default so that it ends in minutes on two cores."""
    return Preset(
        "selfcheck",
        "the suite's ResNet-50 cells beside each framework's plain loop (membench selfcheck)",
        {"resnet50": WorkloadSize((4,), {"image_size": image_size, "num_classes": 1000})},
        warmup_min_steps=3,
        warmup_max_seconds=30.0,
        warmup_tolerance=0.10,
        measure_steps=5,
        cell_timeout_seconds=900,
        strategies=SELFCHECK_STRATEGIES,
    )


PRESETS["selfcheck"] = selfcheck_preset(int(os.environ.get(SELFCHECK_IMAGE_SIZE_ENV) or 64))

FRAMEWORKS: dict[str, Framework] = {}


def register_framework(framework: Framework) -> None:
    FRAMEWORKS[framework.name] = framework


def register_workload(workload: Workload) -> None:
    WORKLOADS[workload.name] = workload


register_framework(
    Framework("torch", "PyTorch", "membench.backends.torch_backend:TorchBackend", "torch")
)
register_framework(Framework("jax", "JAX/Flax", "membench.backends.jax_backend:JaxBackend", "jax"))
register_framework(
    Framework("jittor", "Jittor", "membench.backends.jittor_backend:JittorBackend", "jittor")
)


def _lookup(table: dict, kind: str, name: str):
    if name not in table:
        raise UnknownNameError(kind, name, list(table))
    return table[name]


def workload(name: str) -> Workload:
    return _lookup(WORKLOADS, "workload", name)


def strategy(name: str) -> Strategy:
    return _lookup(STRATEGIES, "strategy", name)


def preset(name: str) -> Preset:
    return _lookup(PRESETS, "preset", name)


def framework(name: str) -> Framework:
    return _lookup(FRAMEWORKS, "framework", name)


def load_backend(name: str):
    """Import and instantiate a framework's backend (the only place a backend is imported)."""
    module_name, _, class_name = framework(name).backend.partition(":")
    return getattr(importlib.import_module(module_name), class_name)()


def framework_installed(name: str) -> bool:
    """Whether the framework's distribution is installed for the interpreter that runs its
    workers (membench.interpreters), without importing it."""
    import sys
    from importlib.metadata import PackageNotFoundError, version

    from membench.interpreters import InterpreterError, distribution_installed, framework_python

    try:
        python = framework_python(name)
    except InterpreterError:
        return False
    if python != sys.executable:
        return distribution_installed(python, framework(name).distribution)
    try:
        version(framework(name).distribution)
    except PackageNotFoundError:
        return False
    return True


# Extra frameworks/workloads from other packages: a comma-separated list of modules that
# call register_*() when imported. Read at import so worker processes see the same registry;
# last, so that a plugin may use everything above.
for _module in filter(None, os.environ.get("MEMBENCH_PLUGINS", "").split(",")):
    importlib.import_module(_module.strip())
