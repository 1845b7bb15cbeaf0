"""The host allocator strategies (mmap-threshold, infer-mmap-threshold): glibc's threshold
really fixed in the process that measures, refused on GPUs, recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from membench import registry
from membench.cells import supervision
from membench.environment import detected_device
from membench.records import Cell

REPO = Path(__file__).resolve().parents[1]

# Optionally sets the process up for a strategy (imports included), frees a mapped 8 MiB block
# (glibc's dynamic threshold, where not fixed, rises to 8 MiB), allocates 2 MiB and prints
# whether glibc mapped it: the IS_MMAPPED bit of the chunk's size field, the word before it.
PROBE = """
import ctypes, sys
if sys.argv[1] != "-":
    from membench import registry
    from membench.backends import set_up_process
    set_up_process(registry.load_backend("torch"), registry.strategy(sys.argv[1]))
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
libc.free(libc.malloc(8 << 20))
block = libc.malloc(2 << 20)
print(bool(ctypes.c_size_t.from_address(block - ctypes.sizeof(ctypes.c_size_t)).value & 2))
"""
on_a_cpu = pytest.mark.skipif(detected_device() != "cpu", reason="a CPU host's strategies")


def mapped(strategy: str) -> bool:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, strategy],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return out.stdout.split()[-1] == "True"


@on_a_cpu
def test_the_strategy_maps_a_block_that_the_risen_threshold_keeps_on_the_heap():
    assert not mapped("-")  # glibc's default: the 2 MiB block is on the heap
    assert not mapped("baseline")
    for name in ("mmap-threshold", "infer-mmap-threshold"):
        assert mapped(name), name  # mapped: returned to the OS when freed


@pytest.mark.parametrize("framework", ["torch", "jax", "jittor"])
def test_every_framework_runs_it_on_a_cpu_and_refuses_it_on_a_gpu(framework):
    backend = registry.load_backend(framework)
    for name in ("mmap-threshold", "infer-mmap-threshold"):
        assert backend.strategy_refusal(registry.strategy(name), "cpu") is None
        reason = backend.strategy_refusal(registry.strategy(name), "cuda")
        assert reason and "device memory" in reason


@on_a_cpu
def test_its_cells_measure_and_say_how(store):
    cells = [Cell("transformer", "torch", s, 4, "smoke") for s in ("mmap-threshold", "infer")]
    records = {r.cell.strategy: r for r in supervision.run(cells, store).records}
    record = records["mmap-threshold"]
    assert record.status == "ok", record.reason
    assert record.environment["host_malloc_mmap_threshold_bytes"] == 1 << 20
    assert record.metrics["life_peak_host_rss_bytes"] > 0
    assert records["infer"].status == "ok"
    assert "host_malloc_mmap_threshold_bytes" not in records["infer"].environment


@on_a_cpu
def test_a_host_without_glibc_s_mallopt_records_the_cell_unsupported(monkeypatch):
    import membench.backends as backends
    from membench.instruments.host_malloc import HostMallocUnavailable

    def no_glibc(nbytes: int) -> None:
        raise HostMallocUnavailable("glibc's mallopt is not available here: musl")

    monkeypatch.setattr(backends, "fix_mmap_threshold", no_glibc)
    monkeypatch.setattr(os, "environ", dict(os.environ))  # what set_up_process sets stays here
    torch = registry.load_backend("torch")
    with pytest.raises(backends.Unsupported, match="mallopt is not available here: musl"):
        backends.set_up_process(torch, registry.strategy("mmap-threshold"))
    assert backends.set_up_process(torch, registry.strategy("infer")) == {"env_set_by_strategy": {}}


def test_selfcheck_s_reference_loop_starts_with_the_threshold_the_worker_fixes():
    from membench.cells.selfcheck import child_env

    assert child_env("torch", "mmap-threshold")["MALLOC_MMAP_THRESHOLD_"] == str(1 << 20)
    assert "MALLOC_MMAP_THRESHOLD_" not in child_env("torch", "baseline")
