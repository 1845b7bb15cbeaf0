"""The host C allocator's settings a strategy may fix in a worker (glibc's malloc).

glibc serves a block above its mmap threshold with a mapping of its own, returned to the OS
when freed, and one below it from the heap, whose freed pages stay resident. The threshold
starts at 128 KiB and rises to the size of each mapped block freed, up to 32 MiB (the dynamic
threshold; mallopt(3)), so after a step's first large free its activations come from the heap
and stay there. mallopt(M_MMAP_THRESHOLD) fixes it and turns the rising off. The variable
MALLOC_MMAP_THRESHOLD_ does the same but is read at the process's start, before a worker
knows its strategy; mallopt works at any time, for the blocks allocated after it.
"""

from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3  # malloc.h
# The fixed threshold: a block of 1 MiB or more is mapped, and unmapped when freed.
FIXED_MMAP_THRESHOLD_BYTES = 1 << 20


class HostMallocUnavailable(RuntimeError):
    """This process's C library has no glibc mallopt (musl, macOS)."""


def fix_mmap_threshold(nbytes: int = FIXED_MMAP_THRESHOLD_BYTES) -> None:
    """Fix glibc's mmap threshold at nbytes for this process's later allocations."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError) as exc:
        raise HostMallocUnavailable(f"glibc's mallopt is not available here: {exc}") from exc
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    if mallopt(M_MMAP_THRESHOLD, nbytes) != 1:
        raise HostMallocUnavailable(f"mallopt(M_MMAP_THRESHOLD, {nbytes}) was refused")
