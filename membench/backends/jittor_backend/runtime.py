"""Jittor in this process: the environment its import needs (set first), the import itself,
its oneDNN and its kernel cache. Its weights beside torch's are weights.py; BatchNorm's
statistics among its parameters, batchnorm.py."""

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
