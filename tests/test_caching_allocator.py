"""The CUDA caching allocator's rules, replayed: each case worked out by hand from
c10/cuda/CUDACachingAllocator.cpp's constants (512-byte blocks, 2 MiB small segments, 20 MiB
segments for requests under 10 MiB, larger ones rounded to 2 MiB, split and merge rules)."""

import pytest

from membench.backends.torch_backend.caching_allocator import (
    CachingAllocator,
    OutOfMemory,
    round_size,
    segment_size,
)

MiB = 2**20


def test_sizes_round_to_blocks_and_segments():
    assert round_size(1) == 512 and round_size(512) == 512 and round_size(513) == 1024
    assert segment_size(100) == 2 * MiB  # small pool
    assert segment_size(1 * MiB) == 2 * MiB
    assert segment_size(3 * MiB) == 20 * MiB  # large, under 10 MiB
    assert segment_size(11 * MiB + 1) == 12 * MiB  # rounded up to 2 MiB


def test_small_requests_share_a_segment_and_large_ones_split_theirs():
    a = CachingAllocator()
    a.alloc(1, 100)
    a.alloc(2, 1000)
    assert (a.allocated, a.reserved) == (512 + 1024, 2 * MiB)  # one small segment
    a.alloc(3, 3 * MiB)
    a.alloc(4, 3 * MiB)  # from the 17 MiB the first left (split: over 1 MiB remains)
    assert a.reserved == 22 * MiB and a.allocated == 512 + 1024 + 6 * MiB


def test_a_block_too_close_in_size_is_taken_whole_and_counted_whole():
    a = CachingAllocator()
    a.alloc(1, 12 * MiB)
    a.free(1)
    a.alloc(2, 11 * MiB + 512)  # 12 MiB cached; 511.5 KiB would remain: not split
    assert a.allocated == 12 * MiB and a.reserved == 12 * MiB


def test_freed_neighbours_merge_and_serve_a_larger_request():
    a = CachingAllocator()
    a.alloc(1, 3 * MiB)
    a.alloc(2, 3 * MiB)
    a.free(1)
    a.free(2)  # the 20 MiB segment whole again
    a.alloc(3, 20 * MiB)
    assert a.reserved == 20 * MiB and a.peak_reserved == 20 * MiB


def test_a_limit_releases_unused_segments_then_runs_out():
    a = CachingAllocator(limit=40 * MiB)
    a.alloc(1, 24 * MiB)
    a.free(1)  # cached: 24 MiB reserved, none allocated
    a.alloc(2, 30 * MiB)  # 24 + 30 > 40: the cached segment is released first
    assert a.reserved == 30 * MiB
    with pytest.raises(OutOfMemory):
        a.alloc(3, 12 * MiB)  # 30 in use + 12 > 40


def test_expandable_segments_grow_in_pages_and_reuse_their_end():
    a = CachingAllocator(expandable_segments=True)
    a.alloc(1, 3 * MiB)
    assert a.reserved == 20 * MiB  # one 20 MiB page of the large pool
    a.alloc(2, 30 * MiB)  # 3 + 30 MiB: a second page
    assert a.reserved == 40 * MiB
