"""The host allocator strategies (mmap-threshold, infer-mmap-threshold): glibc's threshold
really fixed in the process that measures, refused on GPUs, recorded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from membench import registry
from membench.cells import supervision
from membench.records import Cell

REPO = Path(__file__).resolve().parents[1]

# Frees a mapped 8 MiB block (glibc's dynamic threshold rises to 8 MiB), optionally sets the
# process up for a strategy, then allocates 2 MiB and prints the bytes glibc holds in
# mappings (mallinfo2's hblkhd): a mapped 2 MiB block counts there, a heap block does not.
PROBE = """
import ctypes, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
libc.mallinfo2.restype = MallInfo2
libc.free(libc.malloc(8 << 20))
if sys.argv[1] != "-":
    from membench import registry
    from membench.backends import set_up_process
    set_up_process(registry.load_backend("torch"), registry.strategy(sys.argv[1]))
before = libc.mallinfo2().hblkhd
block = libc.malloc(2 << 20)
print(libc.mallinfo2().hblkhd - before)
"""


def mapped_after(strategy: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, strategy],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return int(out.stdout.split()[-1])


def test_the_strategy_maps_a_block_that_the_risen_threshold_keeps_on_the_heap():
    assert mapped_after("-") == 0  # glibc's default: the 2 MiB block is on the heap
    assert mapped_after("baseline") == 0
    for name in ("mmap-threshold", "infer-mmap-threshold"):
        assert mapped_after(name) >= 2 << 20, name  # mapped: returned to the OS when freed


@pytest.mark.parametrize("framework", ["torch", "jax", "jittor"])
def test_every_framework_runs_it_on_a_cpu_and_refuses_it_on_a_gpu(framework):
    backend = registry.load_backend(framework)
    for name in ("mmap-threshold", "infer-mmap-threshold"):
        assert backend.strategy_refusal(registry.strategy(name), "cpu") is None
        reason = backend.strategy_refusal(registry.strategy(name), "cuda")
        assert reason and "device memory" in reason


def test_its_cells_measure_and_say_how(store):
    cells = [Cell("transformer", "torch", s, 4, "smoke") for s in ("mmap-threshold", "infer")]
    records = {r.cell.strategy: r for r in supervision.run(cells, store).records}
    record = records["mmap-threshold"]
    assert record.status == "ok", record.reason
    assert record.environment["host_malloc_mmap_threshold_bytes"] == 1 << 20
    assert record.metrics["life_peak_host_rss_bytes"] > 0
    assert records["infer"].status == "ok"
    assert "host_malloc_mmap_threshold_bytes" not in records["infer"].environment


def test_a_host_without_glibc_s_mallopt_records_the_cell_unsupported(monkeypatch):
    import membench.backends as backends
    from membench.instruments.host_malloc import HostMallocUnavailable

    def no_glibc(nbytes: int) -> None:
        raise HostMallocUnavailable("glibc's mallopt is not available here: musl")

    monkeypatch.setattr(backends, "fix_mmap_threshold", no_glibc)
    torch = registry.load_backend("torch")
    with pytest.raises(backends.Unsupported, match="mallopt is not available here: musl"):
        backends.set_up_process(torch, registry.strategy("mmap-threshold"))
    assert backends.set_up_process(torch, registry.strategy("infer")) == {"env_set_by_strategy": {}}
