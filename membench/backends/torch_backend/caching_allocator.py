"""PyTorch's CUDA caching allocator, replayed: what a sequence of tensor allocations and frees
reserves on a GPU, without one.

The rules are those of c10/cuda/CUDACachingAllocator.cpp with its default configuration (no
max_split_size, no rounding to powers of two, no garbage-collection threshold, one stream):
  - a request is rounded up to a multiple of 512 bytes;
  - requests up to 1 MiB come from the small pool, whose segments are 2 MiB; larger ones from
    the large pool, whose segments are 20 MiB for requests under 10 MiB, else the request
    rounded up to a multiple of 2 MiB;
  - a request takes the smallest free block of its pool that holds it (the lowest address on
    a tie), split where the rest is at least 512 bytes (small pool) or over 1 MiB (large pool);
    an unsplit block is allocated whole;
  - a freed block merges with free neighbours of its segment; segments are never returned
    (no empty_cache in a training loop), so the reserve only grows;
  - with expandable segments, each pool is one segment that grows in 2 MiB pages (small pool)
    or 20 MiB pages (large pool) as far as its highest allocated byte needs.
Allocated bytes count each block's size, as torch.cuda.max_memory_allocated does.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20  # largest request of the small pool
SMALL_BUFFER = 2 << 20  # a small-pool segment
LARGE_BUFFER = 20 << 20  # the segment of a large request under MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


def round_size(size: int) -> int:
    """The block size of a request (torch's round_size without power-of-two divisions)."""
    return MIN_BLOCK if size < MIN_BLOCK else MIN_BLOCK * -(-size // MIN_BLOCK)


def segment_size(size: int) -> int:
    """What cudaMalloc is asked for when no cached block fits a (rounded) request."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * -(-size // ROUND_LARGE)


@dataclass
class _Block:
    segment: int
    offset: int
    size: int
    free: bool = True


@dataclass
class _Pool:
    """One pool's segments and its free blocks, ordered by (size, segment, offset)."""

    free: list[tuple[int, int, int]] = field(default_factory=list)
    blocks: dict[tuple[int, int], _Block] = field(default_factory=dict)  # (segment, offset)
    ends: dict[int, int] = field(default_factory=dict)  # segment -> its size


class OutOfMemory(Exception):
    """A segment would take the reserve past the limit, with every free segment released."""


class CachingAllocator:
    """Replay allocations (alloc) and frees (free) and read the peaks, in bytes. limit: the
    reserve's cap (set_per_process_memory_fraction's), None for the whole card."""

    def __init__(self, expandable_segments: bool = False, limit: int | None = None) -> None:
        self.expandable = expandable_segments
        self.limit = limit
        self.pools = {True: _Pool(), False: _Pool()}  # small?
        self.handles: dict[int, tuple[bool, int, int]] = {}  # handle -> (small, segment, offset)
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self._segments = 0
        self._top = {True: 0, False: 0}  # expandable: each pool's mapped size

    def alloc(self, handle: int, size: int) -> None:
        size = round_size(size)
        small = size <= SMALL_SIZE
        pool = self.pools[small]
        i = bisect.bisect_left(pool.free, (size, -1, -1))
        if i == len(pool.free):
            block = self._new_segment(pool, small, size)
        else:
            _, seg, off = pool.free.pop(i)
            block = pool.blocks[(seg, off)]
        rest = block.size - size
        if rest >= MIN_BLOCK if small else rest > SMALL_SIZE:
            tail = _Block(block.segment, block.offset + size, rest)
            pool.blocks[(tail.segment, tail.offset)] = tail
            bisect.insort(pool.free, (tail.size, tail.segment, tail.offset))
            block.size = size
        block.free = False
        self.handles[handle] = (small, block.segment, block.offset)
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, handle: int) -> None:
        small, seg, off = self.handles.pop(handle)
        pool = self.pools[small]
        block = pool.blocks[(seg, off)]
        self.allocated -= block.size
        block.free = True
        after = pool.blocks.get((seg, off + block.size))
        if after is not None and after.free:  # merge the free neighbour after
            pool.free.remove((after.size, seg, after.offset))
            del pool.blocks[(seg, after.offset)]
            block.size += after.size
        before = self._block_before(pool, seg, off)
        if before is not None and before.free:  # and the one before
            pool.free.remove((before.size, seg, before.offset))
            del pool.blocks[(seg, off)]
            before.size += block.size
            block = before
        bisect.insort(pool.free, (block.size, seg, block.offset))

    def _block_before(self, pool: _Pool, seg: int, off: int) -> _Block | None:
        # blocks tile their segment, so the one before ends where this one starts
        for (s, o), b in pool.blocks.items():
            if s == seg and o + b.size == off:
                return b
        return None

    def _new_segment(self, pool: _Pool, small: bool, size: int) -> _Block:
        if self.expandable:  # one segment per pool, grown at its end
            return self._grow(pool, small, size)
        seg_size = segment_size(size)
        if self.limit is not None and self.reserved + seg_size > self.limit:
            self._release_free_segments()  # as the allocator does before it gives up
            if self.reserved + seg_size > self.limit:
                raise OutOfMemory(f"{seg_size} bytes more past a {self.limit}-byte limit")
        self._segments += 1
        seg = self._segments
        pool.ends[seg] = seg_size
        block = _Block(seg, 0, seg_size)
        pool.blocks[(seg, 0)] = block
        self._reserve(seg_size)
        return block

    def _release_free_segments(self) -> None:
        """cudaFree every segment no allocation uses (release_cached_blocks)."""
        for pool in self.pools.values():
            for seg, size in list(pool.ends.items()):
                block = pool.blocks.get((seg, 0))
                if block is not None and block.free and block.size == size:
                    pool.free.remove((size, seg, 0))
                    del pool.blocks[(seg, 0)]
                    del pool.ends[seg]
                    self.reserved -= size

    def _grow(self, pool: _Pool, small: bool, size: int) -> _Block:
        page = SMALL_BUFFER if small else LARGE_BUFFER
        seg = 0 if small else -1
        top = self._top[small]
        # a free block at the segment's end grows; else the request starts at the end
        last = pool.blocks.get((seg, top - self._tail_free(pool, seg, top)))
        start = last.offset if last is not None and last.free and top else top
        if last is not None and last.free and top:
            pool.free.remove((last.size, seg, last.offset))
            del pool.blocks[(seg, last.offset)]
        grown = max(top, page * -(-(start + size) // page))
        self._reserve(grown - top)
        self._top[small] = grown
        block = _Block(seg, start, grown - start)
        pool.blocks[(seg, start)] = block
        return block

    def _tail_free(self, pool: _Pool, seg: int, top: int) -> int:
        for (s, o), b in pool.blocks.items():
            if s == seg and o + b.size == top and b.free:
                return b.size
        return 0

    def _reserve(self, nbytes: int) -> None:
        self.reserved += nbytes
        self.peak_reserved = max(self.peak_reserved, self.reserved)
