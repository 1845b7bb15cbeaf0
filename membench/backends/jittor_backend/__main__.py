"""`python -m membench.backends.jittor_backend [--save-mem]`: compile Jittor's core once."""

import sys

from membench.backends.jittor_backend.runtime import compile_core

compile_core(save_mem="--save-mem" in sys.argv[1:])
