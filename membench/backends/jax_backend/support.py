"""What the JAX backend runs for each knob value, and how (the table the support matrix, the
plan-time refusals, the docs and the records' notes read)."""

from __future__ import annotations

from membench.backends import ANY, FIXED_MMAP_THRESHOLD, TF32_ELSEWHERE, Implemented, Support
from membench.backends.jax_backend import sharding as jax_sharding


def _not_xla(setting: str) -> str:
    return f"{setting}; XLA's allocator is chosen with XLA_PYTHON_CLIENT_ALLOCATOR"


# precision -> (compute dtype, parameter dtype): the session's model, the record's notes
DTYPES = {
    "fp32": ("float32", "float32"),
    "amp-bf16": ("bfloat16", "float32"),
    "amp-fp16": ("float16", "float32"),
    "half": ("float16", "float16"),
}

BASELINE = (
    "the whole step as one jax.jit function (optax), parameters, BatchNorm statistics and "
    "optimizer state donated; on GPUs float32 in full (jax_default_matmul_precision=highest, "
    "NVIDIA_TF32_OVERRIDE=0)"
)
SUPPORT: Support = {
    "precision": {
        "amp-bf16": Implemented("the model's compute dtype=bfloat16 over float32 parameters"),
        "amp-fp16": Implemented(
            "compute dtype=float16 over float32 parameters, Flax DynamicScale (overflowing "
            "steps skipped)"
        ),
        "half": Implemented("parameters, statistics and input cast to float16"),
    },
    "checkpoint": {True: Implemented("nn.remat on each block")},
    "accumulate": {
        ANY: Implemented(
            "k micro-batches, one optimizer update per step (loop mode: "
            "optax.MultiSteps(every_k_schedule=k), one jitted micro-step per call, state "
            "donated, gradients averaged in the optimizer state, the k-th call applies the "
            "update; a step is the k calls, synchronised once; xla_* metrics are "
            "memory_analysis() of the compiled micro-step, one compile)"
        )
    },
    "accumulate_mode": {
        "scan": Implemented(
            "scan mode instead: lax.scan over the micro-batches inside one jitted step "
            "(XLA:CPU runs convolutions in loop bodies far slower: jax issue 12868)"
        ),
        "sync": "each micro-step is a jitted call whose state is donated to the next: the "
        "calls run in order and XLA frees a call's buffers as it ends, so blocking after "
        "each only adds waiting",
    },
    "mode": {"infer": Implemented("jitted forward with BatchNorm running averages, no autodiff")},
    "compile": {
        True: "JAX always runs the step compiled (jax.jit): the baseline is the compiled "
        "run, so this strategy would measure it twice under another name"
    },
    "allocator": {
        "expandable-segments": _not_xla("expandable_segments is a PyTorch CUDA setting"),
        "cuda-managed": _not_xla("use_cuda_managed_allocator is a Jittor setting"),
        "host-swap": _not_xla("JT_SAVE_MEM is a Jittor setting"),
        "fixed-mmap-threshold": FIXED_MMAP_THRESHOLD,
    },
    "fusion": {
        False: "XLA fuses as part of compiling the step; no user setting turns fusion off "
        "(only debugging flags that drop individual compiler passes)"
    },
    "attention": {
        "fused": Implemented(
            "jax.nn.dot_product_attention(is_causal=True): implementation='cudnn' (fused) "
            "for float16/bfloat16 on GPUs; in float32 or on CPUs 'xla', XLA's ordinary "
            "attention (the record says attention_kernel: xla)"
        )
    },
    "memory_format": {
        "channels-last": "the Flax models take NHWC / NDHWC already (models/*/flax_impl.py), "
        "and XLA lays out each convolution itself: the baseline is the channels-last run"
    },
    "matmul": {
        "tf32": Implemented("jax_default_matmul_precision=tensorfloat32", ("cuda",), TF32_ELSEWHERE)
    },
    "eval_autograd": {
        True: "a JAX forward outside a transformation records no tape, so there is no "
        "no_grad to forget; a graph is kept only by jax.vjp's pullback, a deliberate call "
        "for gradients that JAX inference code does not make"
    },
    "models": {
        "two-resident": Implemented("two parameter trees, one compiled forward run on each"),
        "two-sequential": Implemented(
            "each step initialises model 0 (jitted init), runs it, deletes it and "
            "gc.collect(), then model 1; JAX has no user call that returns its allocator's pool"
        ),
    },
    "data": {
        "host": Implemented(
            "numpy batch, jax.device_put + block_until_ready each step, timed apart"
        )
    },
    "hygiene_every": {
        ANY: Implemented(
            "gc.collect() every k steps; jax.clear_caches() is not called (it drops compiled "
            "executables, which the next step would recompile)"
        )
    },
    "lengths": {
        "varying": Implemented(
            "x[:, :n], one AOT-compiled forward per length (jit specialises on shapes); the "
            "first step compiles and runs each length once"
        )
    },
    "sharding": jax_sharding.SUPPORT,
}
