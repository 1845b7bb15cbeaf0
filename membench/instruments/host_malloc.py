"""The host C allocator's settings a strategy may fix in a worker (glibc's malloc).

glibc serves a block of at least its mmap threshold, when no free heap chunk can, with a
mapping of its own, returned to the OS when freed; a smaller block comes from the heap, whose
freed pages stay resident. The threshold starts at 128 KiB and rises to the size of each
mapped block freed, up to 32 MiB (the dynamic threshold; mallopt(3)), so after a step's first
large free its activations come from the heap and stay there. mallopt(M_MMAP_THRESHOLD) fixes
it and turns the rising off, for the blocks allocated after it; called before anything large
was freed (a worker before its framework's import), the trim threshold is still glibc's
default too. MALLOC_MMAP_THRESHOLD_ does the same from a process's start, and every child
inherits it: the worker calls mallopt instead; a process the suite starts without a worker
(selfcheck's reference loop) gets the variable.
"""

from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3  # malloc.h
MMAP_THRESHOLD_ENV = "MALLOC_MMAP_THRESHOLD_"
# The fixed threshold: a block of 1 MiB or more is mapped, and unmapped when freed.
FIXED_MMAP_THRESHOLD_BYTES = 1 << 20


def mmap_threshold(allocator: str) -> int | None:
    """The threshold a strategy's allocator knob fixes, in bytes (None: glibc's own)."""
    return FIXED_MMAP_THRESHOLD_BYTES if allocator == "fixed-mmap-threshold" else None


class HostMallocUnavailable(RuntimeError):
    """This process's malloc is not glibc's (musl, macOS, a preloaded jemalloc or tcmalloc)."""


def _address(function: object) -> int | None:
    return ctypes.cast(function, ctypes.c_void_p).value


def fix_mmap_threshold(nbytes: int = FIXED_MMAP_THRESHOLD_BYTES) -> None:
    """Fix glibc's mmap threshold at nbytes for this process's later allocations."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt, in_use = libc.mallopt, ctypes.CDLL(None).malloc
    except (OSError, AttributeError) as exc:
        raise HostMallocUnavailable(f"glibc's mallopt is not available here: {exc}") from exc
    if _address(in_use) != _address(libc.malloc):  # LD_PRELOAD put another malloc first
        raise HostMallocUnavailable("this process's malloc is not glibc's (a preloaded one)")
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    if mallopt(M_MMAP_THRESHOLD, nbytes) != 1:
        raise HostMallocUnavailable(f"mallopt(M_MMAP_THRESHOLD, {nbytes}) was refused")
