"""A worker's ties to its runner, set first thing in the worker (stdlib only, Linux).

- The kernel ends the worker when the runner that started it dies (PR_SET_PDEATHSIG), even
  by kill -9; the worker then checks that its parent is still that runner (it may have died
  before the request took effect) and exits at once if not.
- The worker enforces its cell's deadline itself (an alarm whose default action ends the
  process in the kernel, so a step stuck in native code holding Python's GIL is ended too);
  the runner's own timeout comes first and classifies the cell.
- The worker asks the kernel's out-of-memory killer to pick it before anything else.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
OOM_SCORE_ADJ = 1000  # the most a process may raise its own (the OOM killer's first pick)
# Exit status of a worker whose runner was gone before it could bind to it.
ORPHANED = 3


def bind_to_parent(parent_pid: int) -> bool:
    """Ask for SIGKILL when the parent dies; exit ORPHANED if the parent is not parent_pid
    any more. False where the kernel offers no such request (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return False
    if os.getppid() != parent_pid:  # the runner died before the request above
        os._exit(ORPHANED)
    return True


def arm_deadline(seconds: float) -> None:
    """End this process (SIGALRM's default action) once seconds have passed."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(max(1, math.ceil(seconds)))


def first_to_go() -> None:
    """Raise this process's oom_score_adj (best effort: an error leaves it as it was)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(OOM_SCORE_ADJ))
    except OSError:
        pass
