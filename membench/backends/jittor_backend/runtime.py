"""Jittor in this process: the environment its import needs (set first), the import itself,
its oneDNN and kernel cache, and its weights beside torch's (BatchNorm statistics
among the parameters, torch's state loaded name for name)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Jittor's amp levels: 5 = ops prefer float16 where an input is float16 (sum, exp and the like
# stay float32) and arrays created inside the graph follow; the level Jittor's own fp16 ResNet
# test trains with.
AMP_LEVEL = 5
# Device limit for JT_SAVE_MEM's host swapping (GPU only): a fixed budget, so that a cell shows
# what swapping costs and saves under the same pressure on any card.
SAVE_MEM_DEVICE_LIMIT_BYTES = 8 * 2**30
# Jittor's cache_compile turns every `#ifdef JT_*` whose variable is set into a -D flag
# (src/utils/cache_compile.cc): JT_SAVE_MEM changes the command of each core file that includes
# src/mem/swap.h, which is then recompiled in place. save-mem cells keep a core of their own,
# in a cache of its own (cache_name, a folder under Jittor's cache; JITTOR_HOME would be
# written into ~/.cache/jittor/config.json as every later process's default).
SAVE_MEM_CACHE_NAME = "membench-save-mem"


def base_env(device: str) -> dict[str, str]:
    """Jittor's environment for this machine, whatever the strategy (see scripts/install.sh)."""
    env = {"FIX_TORCH_ERROR": "0"}  # else `import jittor` imports torch into our baseline
    if device == "cuda":
        # cutt, cutlass and oneDNN would be downloaded from Jittor's server; on a GPU cuBLAS
        # and cuDNN do the work (oneDNN serves CPU convolutions only).
        env.update(use_cutt="0", use_cutlass="0", use_mkl="0")
    else:
        env["nvcc_path"] = ""  # a CUDA toolkit without a GPU: no CUDA build attempt
    return env


def prepare_import(device: str | None = None) -> dict[str, str]:
    """Set Jittor's environment before `import jittor` in this process (tests, the core compile)."""
    from membench.environment import detected_device

    env = base_env(device or detected_device())
    for key, value in env.items():
        os.environ.setdefault(key, value)
    return env


def import_into_host_process(device: str | None = None) -> Any:
    """Import Jittor into a process that is not a cell's worker (the test session).

    Jittor installs C signal handlers that quick-exit the whole process on SIGINT and when any
    child process dies by a signal (SIGCHLD): a test runner that kills a hung worker would die
    with it. Python's own handlers are put back; workers keep Jittor's, as Jittor runs.
    """
    import signal

    prepare_import(device)
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGCHLD)}
    import jittor

    for sig, handler in saved.items():
        signal.signal(sig, handler)
    return jittor


def onednn_in_use() -> bool:
    """Whether Jittor's convolutions run on oneDNN (its mkl ops compiled and loaded)."""
    import jittor as jt

    return jt.compile_extern.mkl_ops is not None


def jit_cache_files() -> int:
    """Compiled op kernels in Jittor's on-disk cache (shared by every process of this user)."""
    import jittor as jt

    path = Path(jt.flags.cache_path) / "jit"
    return sum(1 for _ in path.iterdir()) if path.is_dir() else 0


# Jittor lists BatchNorm running statistics among a module's parameters (torch keeps them as
# buffers); they are told apart by name, because Jittor's eval() marks every parameter stop_grad.
_RUNNING = ("running_mean", "running_var")


def trainable(model: Any) -> list[Any]:
    """The weights the optimizer updates (every parameter but BatchNorm's running statistics)."""
    return [p for n, p in model.named_parameters() if not n.endswith(_RUNNING)]


def running_statistics(model: Any) -> list[Any]:
    return [p for n, p in model.named_parameters() if n.endswith(_RUNNING)]


def freeze_batchnorm(model: Any, frozen: bool = True) -> None:
    """BatchNorm on its running averages (frozen) or batch statistics, weights still trained
    (Jittor's eval() would also stop every parameter's gradient)."""
    from jittor import nn

    for m in model.modules():
        if isinstance(m, nn.BatchNorm):
            m.is_train = not frozen


def from_torch(state: dict[str, Any]) -> dict[str, Any]:
    """A torch model's state_dict (numpy arrays) as the Jittor model's: every model module keeps
    torch's names and layouts; torch's BatchNorm step counter has no Jittor counterpart."""
    import numpy as np

    return {
        name: np.ascontiguousarray(value, dtype=np.float32)
        for name, value in state.items()
        if not name.endswith("num_batches_tracked")
    }


def load_torch_state(model: Any, state: dict[str, Any]) -> None:
    """Copy a torch model's state_dict into its Jittor twin, refusing any name or shape
    mismatch (Jittor's load_state_dict would skip them)."""
    converted = from_torch(state)
    own = model.state_dict()
    if set(own) != set(converted):
        missing, extra = set(own) - set(converted), set(converted) - set(own)
        raise KeyError(f"state names differ: missing {sorted(missing)}, extra {sorted(extra)}")
    for name, value in converted.items():
        if tuple(own[name].shape) != value.shape:
            raise ValueError(f"{name}: shape {value.shape}, model has {tuple(own[name].shape)}")
    model.load_state_dict(converted)
