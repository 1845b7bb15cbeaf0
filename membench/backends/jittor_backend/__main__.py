"""`python -m membench.backends.jittor_backend [--save-mem]`: compile Jittor's core once.

Here, above both the backend and the runtime: the save-mem core is compiled under the very
environment the backend gives save-mem cells."""

from __future__ import annotations

import os
import sys

from membench import registry
from membench.backends.jittor_backend.backend import JittorBackend
from membench.backends.jittor_backend.runtime import onednn_in_use, prepare_import


def compile_core(save_mem: bool = False) -> None:
    """Compile Jittor's core and its oneDNN convolution ops once, and say what is in use;
    save_mem: the save-mem cells' own core (GPU only), in its own cache."""
    if save_mem:
        cells = JittorBackend().env_vars(registry.strategy("save-mem"), "cuda")
        os.environ.update({k: v for k, v in cells.items() if k != "device_mem_limit"})
    env = prepare_import()
    import jittor as jt
    import numpy as np

    conv = jt.nn.Conv2d(3, 4, 3, padding=1, bias=False)
    x = jt.array(np.ones((1, 3, 8, 8), np.float32))
    jt.grad(conv(x).sum(), conv.weight).sync()
    print(
        f"Jittor {jt.__version__} ready: oneDNN {'in use' if onednn_in_use() else 'NOT in use'}, "
        f"CUDA {'in use' if jt.has_cuda else 'off'}, cache {jt.flags.cache_path}, env {env}"
    )
    if not onednn_in_use():
        print("warning: Jittor runs convolutions without oneDNN (much slower)", file=sys.stderr)


if __name__ == "__main__":
    compile_core(save_mem="--save-mem" in sys.argv[1:])
