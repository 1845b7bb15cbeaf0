"""What the Jittor backend runs for each knob value, and how (the table the support matrix,
the plan-time refusals, the docs and the records' notes read)."""

from __future__ import annotations

from membench.backends import ANY, FIXED_MMAP_THRESHOLD, TF32_ELSEWHERE, Implemented, Support
from membench.backends.jittor_backend.runtime import (
    AMP_LEVEL,
    SAVE_MEM_CACHE_NAME,
    SAVE_MEM_DEVICE_LIMIT_BYTES,
)

GPU_LEVER = (
    "use_cuda_managed_allocator and JT_SAVE_MEM relieve GPU memory (unified memory, swapping "
    "device memory to the host); on a CPU host the tensors already live in host memory"
)


# Jittor's data parallelism is MPI: it compiles its mpi ops at import when it finds mpicc, and
# runs under `mpirun -np W` (ranks from OMPI_COMM_WORLD_*), not under the runner's launch.
JITTOR_MPI = (
    "Jittor's data parallelism needs its MPI build (mpicc found at import, then `mpirun -np W`); "
    "this suite's install has no OpenMPI and its rank launch is torchrun's environment, not "
    "mpirun: not implemented"
)
JITTOR_NO_SHARDING = (
    "Jittor has no sharded optimizer or parameter sharding: its MPI data parallelism "
    "all-reduces whole gradients on every rank"
)

# precision -> the inputs' low-precision dtype (the session's batch and amp, the record's notes)
HALF_DTYPES = {"amp-fp16": "float16", "amp-bf16": "bfloat16", "half": "float16"}

BASELINE = (
    "the step as Jittor's examples write it: optimizer.step(loss), jt.sync_all(True); "
    "operators fused and JIT-compiled; on GPUs float32 in full (use_tensorcore=0, "
    "NVIDIA_TF32_OVERRIDE=0: its cuDNN convolutions keep cuDNN's default math, TF32 allowed)"
)
SUPPORT: Support = {
    "precision": {
        "amp-bf16": Implemented(
            f"auto_mixed_precision_level={AMP_LEVEL} around forward and backward, bfloat16 "
            "inputs over float32 parameters, the update in float32; no loss scaler"
        ),
        "amp-fp16": Implemented(
            f"auto_mixed_precision_level={AMP_LEVEL} with float16 inputs over float32 "
            "parameters; no loss scaling (Jittor has no loss scaler)"
        ),
        "half": Implemented("model.float16(), input float16"),
    },
    "checkpoint": {
        True: "Jittor has no activation checkpointing API (no recompute-in-backward "
        "primitive); the suite does not imitate one"
    },
    "accumulate": {
        ANY: Implemented("optimizer.backward(loss / k) per micro-batch, one optimizer.step()")
    },
    "accumulate_mode": {
        "scan": "Jittor has no loop operator inside its graph: a Python loop over the "
        "micro-batches builds one lazy graph, which is the loop mode",
        "sync": Implemented(
            "optimizer.backward(loss / k) then jt.sync_all() per micro-batch, one "
            "optimizer.step(): each micro-batch's graph runs and frees before the next"
        ),
    },
    "mode": {"infer": Implemented("model.eval() under jt.no_grad()")},
    "compile": {
        True: "Jittor always runs fused, JIT-compiled operators: the baseline is the "
        "compiled run (its compile time is in first_step_seconds); no-fuse is the "
        "uncompiled one"
    },
    "allocator": {
        "expandable-segments": "expandable_segments is a PyTorch CUDA allocator setting; "
        "Jittor's allocator levers are the managed-allocator and save-mem strategies",
        "cuda-managed": Implemented(
            "use_cuda_managed_allocator=1 (CUDA unified memory)", ("cuda",), GPU_LEVER
        ),
        "host-swap": Implemented(
            f"JT_SAVE_MEM=1 with device_mem_limit={SAVE_MEM_DEVICE_LIMIT_BYTES} "
            f"({SAVE_MEM_DEVICE_LIMIT_BYTES // 2**30} GiB): variables swap to host memory past "
            f"the limit; core cache {SAVE_MEM_CACHE_NAME}",
            ("cuda",),
            GPU_LEVER,
        ),
        "fixed-mmap-threshold": FIXED_MMAP_THRESHOLD,
    },
    "fusion": {False: Implemented("no_fuse=1 (set before import): every operator a kernel")},
    "matmul": {
        "tf32": Implemented(
            "use_tensorcore=1: cuBLAS computes float32 as CUBLAS_COMPUTE_32F_FAST_TF32; cuDNN "
            "convolutions get CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, which also allows "
            "float16 conversion (extern/cuda/cudnn/ops/cudnn_conv_op.cc)",
            ("cuda",),
            TF32_ELSEWHERE,
        )
    },
    "attention": {
        "fused": "Jittor has no fused attention kernel for CPU or CUDA: "
        "jittor.attention.scaled_dot_product_attention writes the product, mask and "
        "softmax out as separate ops (the plain attention); its flash attention op is "
        "for Ascend NPUs only"
    },
    "eval_autograd": {
        True: Implemented(
            "model.eval() outside jt.no_grad(): eval() stops every parameter's gradient, but a "
            "jt.array input is differentiable, so the graph back to the input is recorded; the "
            "output is held until the next step's forward has run"
        )
    },
    "models": {
        "two-resident": Implemented("two models built at setup; each step runs both"),
        "two-sequential": Implemented(
            "each step builds model 0, runs it, deletes it, jt.sync_all(True) + jt.gc(), "
            "then the same for model 1"
        ),
    },
    "data": {
        "host": Implemented("numpy batch, jt.array(...) + jt.sync_all(True) each step, timed apart")
    },
    "hygiene_every": {ANY: Implemented("jt.sync_all(True) + jt.gc() after every k steps")},
    "lengths": {
        "varying": Implemented(
            "x[:, :n], n from a seeded schedule; Jittor compiles each new shape's kernels, the "
            "first step runs each length once"
        )
    },
    "sharding": {
        "replicated": JITTOR_MPI,
        **dict.fromkeys(("zero1", "zero2", "zero3"), JITTOR_NO_SHARDING),
    },
}
