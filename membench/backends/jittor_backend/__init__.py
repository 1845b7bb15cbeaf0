"""Jittor backend. jittor is imported inside methods, after the worker has set the env.

Used the way Jittor's own examples use it: the model's parameters handed to jt.optim.SGD,
`optimizer.step(loss)` for a step, `optimizer.backward(loss / k)` per micro-batch then
`optimizer.step()` for accumulation, `jt.flags.auto_mixed_precision_level` with float16 inputs
for mixed precision, `model.eval()` under `jt.no_grad()` for inference. Jittor always fuses
operators and compiles each new fused kernel on first use (cached on disk under
~/.cache/jittor); the first step holds that compilation.

Running this module (`python -m membench.backends.jittor_backend`) compiles Jittor's core and
its oneDNN ops once on this machine: scripts/install.sh does it, so that no cell or test pays
the one-off compile (minutes). With `--save-mem` (GPU) it compiles the save-mem cells' core,
kept in a cache of its own.

support (what it runs for each knob value, and how), runtime (its environment, import and
kernel cache), weights (torch's weights loaded name for name), batchnorm (its running
statistics among the parameters), session (the step's primitives), readings (what the worker
reads off a session), backend (declarations, environment, the session's construction),
__main__ (the core compile).
"""

from membench.backends.jittor_backend.backend import JittorBackend
from membench.backends.jittor_backend.batchnorm import (
    freeze_batchnorm,
    running_statistics,
    trainable,
)
from membench.backends.jittor_backend.runtime import (
    SAVE_MEM_CACHE_NAME,
    import_into_host_process,
    onednn_in_use,
    prepare_import,
)
from membench.backends.jittor_backend.session import JittorSession
from membench.backends.jittor_backend.weights import from_torch, load_torch_state

__all__ = [
    "SAVE_MEM_CACHE_NAME", "JittorBackend", "JittorSession", "freeze_batchnorm",
    "from_torch", "import_into_host_process", "load_torch_state", "onednn_in_use",
    "prepare_import", "running_statistics", "trainable",
]  # fmt: skip
