"""The strategies: named sets of knobs, each computing the baseline's function."""

from __future__ import annotations

from membench.registry.knobs import Strategy
from membench.registry.names import lookup

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
            "mmap-threshold",
            "fp32 training with glibc's mmap threshold fixed at 1 MiB: large freed blocks go "
            "back to the OS at once (CPU hosts)",
            allocator="fixed-mmap-threshold",
        ),
        Strategy(
            "infer-mmap-threshold",
            "inference with glibc's mmap threshold fixed at 1 MiB (baseline: infer; CPU hosts)",
            mode="infer",
            allocator="fixed-mmap-threshold",
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
            "channels-last",
            "fp32 training with images and convolution weights laid out channels-last (NHWC / "
            "NDHWC), as convnets are trained on GPUs",
            memory_format="channels-last",
        ),
        Strategy(
            "amp-bf16-channels-last",
            "bfloat16 mixed precision with a channels-last layout (baseline: amp-bf16): the "
            "tensor-core recipe for convnets",
            precision="amp-bf16",
            memory_format="channels-last",
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


def strategy(name: str) -> Strategy:
    return lookup(STRATEGIES, "strategy", name)
