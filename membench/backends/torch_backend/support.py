"""What the PyTorch backend runs for each knob value, and how (the table the support matrix,
the plan-time refusals, the docs and the records' notes read)."""

from __future__ import annotations

from membench.backends import ANY, FIXED_MMAP_THRESHOLD, TF32_ELSEWHERE, Implemented, Support
from membench.backends.phases import LENGTH_LEVELS
from membench.backends.torch_backend import sharding

# precision -> torch.autocast's dtype (the session's autocast, the record's notes)
AUTOCAST_DTYPES = {"amp-bf16": "bfloat16", "amp-fp16": "float16"}

JITTOR_LEVER = (
    "a Jittor allocator lever (use_cuda_managed_allocator, JT_SAVE_MEM); PyTorch's caching "
    "allocator has no such mode"
)

BASELINE = (
    "fp32 training step in eager mode: forward, loss, backward, optimizer step; on GPUs "
    "float32 in full (allow_tf32 off for matmuls and cuDNN, NVIDIA_TF32_OVERRIDE=0)"
)
SUPPORT: Support = {
    "precision": {
        "amp-bf16": Implemented("torch.autocast(dtype=bfloat16) around forward and loss"),
        "amp-fp16": Implemented(
            "torch.autocast(dtype=float16) and a GradScaler (dynamic loss scaling)"
        ),
        "half": Implemented("model and input cast to float16 (model.half())"),
    },
    "checkpoint": {True: Implemented("torch.utils.checkpoint per block, use_reentrant=False")},
    "accumulate": {ANY: Implemented("k micro-batches, each loss divided by k, one optimizer step")},
    "accumulate_mode": {
        "scan": "PyTorch has no in-graph loop for a training step: its users accumulate in "
        "a Python loop of forward/backward calls, which is the loop mode",
        "sync": "PyTorch frees a micro-batch's activations when its backward ends (eager; "
        "on CUDA the caching allocator reuses them in stream order): a synchronisation "
        "after each micro-batch changes no memory, it only adds waiting",
    },
    "mode": {"infer": Implemented("model.eval() and torch.inference_mode(), forward only")},
    "compile": {
        True: Implemented(
            "torch.compile(model), default mode, cold cache (an Inductor cache of the cell's "
            "own): its cost is in the first step"
        )
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
        "fixed-mmap-threshold": FIXED_MMAP_THRESHOLD,
    },
    "fusion": {
        False: "PyTorch eager runs every operator as a kernel of its own: the baseline is "
        "already the unfused run (compile is the fused one)"
    },
    "attention": {
        "fused": Implemented("torch.nn.functional.scaled_dot_product_attention(is_causal=True)")
    },
    "memory_format": {
        "channels-last": Implemented(
            "model.to(memory_format=torch.channels_last) and each batch's images likewise "
            "(channels_last_3d for volumes), as NVIDIA's and timm's recipes train a convnet"
        )
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
            "model.eval(), forward outside no_grad/inference_mode; each step's output (and the "
            "graph behind it) held until the next step's forward has run, as a loop variable is"
        )
    },
    "models": {
        "two-resident": Implemented("two models built at setup; each step runs both"),
        "two-sequential": Implemented(
            "each step builds model 0, runs it, deletes it, gc.collect() and "
            "torch.cuda.empty_cache() on CUDA, then the same for model 1: one model alive at a "
            "time"
        ),
    },
    "data": {
        "host": Implemented(
            "host batch (pinned on CUDA), .to(device, non_blocking=True) + synchronize each "
            "step, timed apart; on a CPU the batch is in host memory already: .to('cpu') "
            "returns it, no copy"
        )
    },
    "hygiene_every": {
        ANY: Implemented(
            "gc.collect() and torch.cuda.empty_cache() (no device cache on a CPU) after every k "
            "steps, timed apart"
        )
    },
    "lengths": {
        "varying": Implemented(
            f"tokens[:, :n], n from a seeded schedule of {LENGTH_LEVELS} lengths; the first "
            "step runs each once"
        )
    },
    "sharding": sharding.SUPPORT,
}
