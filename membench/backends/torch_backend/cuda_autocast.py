"""CUDA's autocast, applied to CPU tensors: what `torch.autocast("cuda")` would cast, for a
step traced on the CPU device (gpu_prediction.py).

CPU autocast casts a different set of operators than CUDA autocast: CUDA runs softmax,
log_softmax, layer_norm, group_norm, sums and losses in float32 and leaves max_pool3d in
the low precision, where CPU autocast does not; so a step traced under CPU autocast holds
activations of other dtypes than the GPU's. Here every operator that torch's own build has an
AutocastCUDA kernel for gets an AutocastCPU kernel applying CUDA's policy, and every operator
that has only an AutocastCPU kernel runs uncast, as it does on CUDA. The operators come from
torch's dispatcher (the build's own registrations); only the policy of each (low precision,
float32, float32 output dtype, widest type) is declared here, from aten's autocast_mode.cpp.

Casts of leaf tensors that require grad (the weights) are cached until autocast exits, as
CUDA autocast's cached_cast does, so each weight is cast once per forward.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# CUDA autocast's low-precision operators (aten's autocast_mode.cpp, lower_precision_fp)
LOW_PRECISION = frozenset(
    {
        "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
        "conv_transpose2d", "conv_transpose3d", "convolution", "cudnn_convolution",
        "cudnn_convolution_transpose", "prelu", "addmm", "addmv", "addr", "matmul", "einsum",
        "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul",
        "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell",
        "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "_scaled_dot_product_flash_attention",
        "scaled_dot_product_attention",
    }
)  # fmt: skip
# float32 as the output dtype where the caller gave none (fp32_set_opt_dtype, fp32_append_dtype)
FLOAT32_OUTPUT = frozenset(
    {
        "prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
        "linalg_matrix_norm", "sum", "norm",
    }
)  # fmt: skip
# the widest floating type of the arguments (promote)
WIDEST = frozenset(
    {
        "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
        "index_put", "tensordot", "scatter_add", "cat", "stack", "index_copy",
    }
)  # fmt: skip
# every other operator with an AutocastCUDA kernel runs in float32 (fp32)


def policy(op_name: str) -> str:
    """'low', 'fp32-output', 'widest' or 'fp32' for an operator CUDA autocast handles."""
    base = op_name.removeprefix("aten::").split(".")[0]
    if base in LOW_PRECISION:
        return "low"
    if base in FLOAT32_OUTPUT:
        return "fp32-output"
    if base in WIDEST:
        return "widest"
    return "fp32"


def autocast_ops(torch: Any, key: str) -> set[str]:
    """The aten operators (name.overload) with a kernel for the dispatch key in this build."""
    names = torch._C._dispatch_get_all_op_names()
    return {n for n in names if torch._C._dispatch_has_kernel_for_dispatch_key(n, key)}


class CudaAutocastOnCpu:
    """While installed, CPU autocast casts as CUDA autocast does (see the module's docstring)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.cuda_ops = autocast_ops(torch, "AutocastCUDA")
        self.cpu_only = autocast_ops(torch, "AutocastCPU") - self.cuda_ops
        self._cache: dict[int, tuple[Any, Any]] = {}  # id(leaf) -> (leaf, its cast)
        self._lib: Any = None

    @contextmanager
    def installed(self) -> Iterator[CudaAutocastOnCpu]:
        torch = self.torch
        self._lib = torch.library.Library("aten", "IMPL")
        original_clear = torch.clear_autocast_cache
        try:
            with warnings.catch_warnings():
                # overriding AutocastCPU's kernels is the point: torch warns of it once
                warnings.filterwarnings("ignore", "Warning only once for all operators")
                for name in sorted(self.cuda_ops | self.cpu_only):
                    op = _overload(torch, name)
                    if op is None:
                        continue
                    rule = policy(name) if name in self.cuda_ops else "none"
                    kernel = self._kernel(op, rule)
                    self._lib.impl(op._name.split("::")[1], kernel, "AutocastCPU")

            def clear() -> None:  # autocast's exit clears its cast cache: ours with it
                self._cache.clear()
                original_clear()

            torch.clear_autocast_cache = clear
            yield self
        finally:
            torch.clear_autocast_cache = original_clear
            self._lib._destroy()
            self._lib = None
            self._cache.clear()

    def _kernel(self, op: Any, rule: str) -> Any:
        torch = self.torch
        excluded = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

        def kernel(*args: Any, **kwargs: Any) -> Any:
            with torch._C._ExcludeDispatchKeyGuard(excluded):
                low = torch.get_autocast_dtype("cpu")
                if rule == "low":
                    args, kwargs = self._cast((args, kwargs), low)
                elif rule == "fp32":
                    args, kwargs = self._cast((args, kwargs), torch.float32)
                elif rule == "widest":
                    args, kwargs = self._cast((args, kwargs), self._widest(args))
                elif rule == "fp32-output" and _wants_dtype(op, args, kwargs):
                    if _eligible(torch, args[0]) and args[0].dtype != torch.float32:
                        kwargs = {**kwargs, "dtype": torch.float32}
                return op(*args, **kwargs)

        return kernel

    def _widest(self, args: Any) -> Any:
        torch = self.torch
        dtypes = [a.dtype for a in _tensors(args) if _eligible(torch, a)]
        return torch.float32 if torch.float32 in dtypes else (dtypes[0] if dtypes else None)

    def _cast(self, tree: Any, dtype: Any) -> Any:
        torch = self.torch
        if dtype is None:
            return tree

        def cast(a: Any) -> Any:
            if not _eligible(torch, a) or a.dtype == dtype:
                return a
            if a.is_leaf and a.requires_grad and torch.is_autocast_cache_enabled():
                hit = self._cache.get(id(a))
                if hit is None or hit[0] is not a:
                    hit = self._cache[id(a)] = (a, a.to(dtype))
                return hit[1]
            return a.to(dtype)

        return torch.utils._pytree.tree_map(cast, tree)


def _overload(torch: Any, name: str) -> Any:
    """torch.ops.aten.<name>.<overload> for 'aten::name.overload', None where not exposed."""
    base, _, overload = name.removeprefix("aten::").partition(".")
    packet = getattr(torch.ops.aten, base, None)
    return getattr(packet, overload or "default", None) if packet is not None else None


def _eligible(torch: Any, a: Any) -> bool:
    """What autocast casts: floating tensors other than float64."""
    return isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != torch.float64


def _tensors(tree: Any) -> list[Any]:
    import torch

    return [a for a in torch.utils._pytree.tree_leaves(tree) if isinstance(a, torch.Tensor)]


def _wants_dtype(op: Any, args: tuple, kwargs: dict) -> bool:
    """The operator takes an optional dtype the caller did not give."""
    names = [a.name for a in op._schema.arguments]
    if "dtype" not in names or kwargs.get("dtype") is not None:
        return False
    i = names.index("dtype")
    return not (i < len(args) and args[i] is not None) and bool(args)
