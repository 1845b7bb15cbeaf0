"""The GPUs a prediction is made for, from their published specifications.

memory_bytes is the card's memory as NVML reports it (what a process can see; cudaMemGetInfo's
total): from the vendors' data sheets for the nominal size and, where a GPU record exists, the
record's own `gpu_memory_bytes`. The rest is what XLA's GPU compiler is told of a target it
cannot query (its GpuTargetConfig): streaming multiprocessors, compute capability, shared memory
per block, and what torch's allocator choices depend on (the compute capability).
"""

from __future__ import annotations

from dataclasses import dataclass

from membench.registry.names import lookup

MIB = 1 << 20
# the share of a description's device memory XLA's GPU compiler schedules for when the compile
# is not given the allocator's limit (gpu_hlo_schedule.cc's GetSchedulerMemoryLimit: 80 / 100)
SCHEDULER_SHARE = (80, 100)


@dataclass(frozen=True)
class Card:
    name: str
    description: str
    memory_bytes: int  # NVML's total: what the card holds for processes, context included
    compute_capability: tuple[int, int]
    sm_count: int
    device_kind: str  # NVML's name, which a GPU record's device_name holds
    # per streaming multiprocessor (CUDA's occupancy tables for the compute capability)
    shared_memory_per_core: int
    shared_memory_per_block_optin: int
    threads_per_core_limit: int
    fpus_per_core: int
    l2_cache_bytes: int
    memory_bandwidth: int  # bytes/s
    clock_ghz: float
    # CUDA's own total (cudaGetDeviceProperties), of which torch's memory fraction and XLA's
    # are taken; None where no record of the card states it (NVML's total stands in)
    cuda_total_bytes: int | None = None

    def budget_limit(self, budget: float) -> int:
        """The allocator limit a capacity budget sets on the card, as the suite's GPU runs set
        it: the budget's fraction of NVML's total, applied by the framework to CUDA's total."""
        return int(budget / self.memory_bytes * (self.cuda_total_bytes or self.memory_bytes))

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "memory_bytes": self.memory_bytes,
            "compute_capability": list(self.compute_capability),
            "device_kind": self.device_kind,
        }


# Per architecture: shared memory per SM and the most a block may opt in to, threads per SM,
# FP32 units per SM (CUDA C++ Programming Guide, compute capabilities table)
_AMPERE = dict(
    shared_memory_per_core=167_936, shared_memory_per_block_optin=166_912,
    threads_per_core_limit=2048, fpus_per_core=64,
)  # fmt: skip
_ADA = dict(
    shared_memory_per_core=102_400, shared_memory_per_block_optin=101_376,
    threads_per_core_limit=1536, fpus_per_core=128,
)  # fmt: skip
_HOPPER = dict(
    shared_memory_per_core=233_472, shared_memory_per_block_optin=232_448,
    threads_per_core_limit=2048, fpus_per_core=128,
)  # fmt: skip

CARDS: dict[str, Card] = {
    c.name: c
    for c in (
        Card(
            "rtx-4090", "NVIDIA GeForce RTX 4090, 24 GB (Ada)", 24_564 * MIB, (8, 9), 128,
            "NVIDIA GeForce RTX 4090", l2_cache_bytes=72 * MIB,
            memory_bandwidth=1_008_000_000_000, clock_ghz=2.52, **_ADA,
        ),
        Card(
            "l4", "NVIDIA L4, 24 GB (Ada)", 23_034 * MIB, (8, 9), 58, "NVIDIA L4",
            l2_cache_bytes=48 * MIB, memory_bandwidth=300_000_000_000, clock_ghz=2.04, **_ADA,
        ),
        Card(
            "a100-40gb", "NVIDIA A100 40 GB SXM (Ampere)", 40_960 * MIB, (8, 0), 108,
            "NVIDIA A100-SXM4-40GB", l2_cache_bytes=40 * MIB,
            memory_bandwidth=1_555_000_000_000, clock_ghz=1.41, **_AMPERE,
        ),
        Card(
            "a100-80gb", "NVIDIA A100 80 GB SXM (Ampere)", 81_920 * MIB, (8, 0), 108,
            "NVIDIA A100-SXM4-80GB", l2_cache_bytes=40 * MIB,
            memory_bandwidth=2_039_000_000_000, clock_ghz=1.41, **_AMPERE,
        ),
        Card(
            "h100-80gb", "NVIDIA H100 80 GB SXM (Hopper)", 81_559 * MIB, (9, 0), 132,
            "NVIDIA H100 80GB HBM3", l2_cache_bytes=50 * MIB,
            memory_bandwidth=3_350_000_000_000, clock_ghz=1.98, **_HOPPER,
        ),
        # the H200's memory as its own records read it (gpu_memory_bytes), and CUDA's total as
        # torch's out-of-memory messages there state it ("a total capacity of 139.80 GiB")
        Card(
            "h200", "NVIDIA H200, 141 GB (Hopper)", 150_754_820_096, (9, 0), 132, "NVIDIA H200",
            l2_cache_bytes=50 * MIB, memory_bandwidth=4_800_000_000_000, clock_ghz=1.98,
            cuda_total_bytes=int(139.80 * 2**30), **_HOPPER,
        ),
    )
}  # fmt: skip

# The cards of the published tables: a 24 GB card, both A100s, an 80 GB Hopper and the H200
TABLE_CARDS = ("rtx-4090", "a100-40gb", "a100-80gb", "h100-80gb", "h200")


def xla_target_config(c: Card, allocator_limit: int | None = None) -> str:
    """The card as XLA's GpuTargetConfig in protobuf text form (what get_topology_desc takes
    for a CUDA target without a device); allocator_limit: XLA's allocator limit on the card
    (MEM_FRACTION's or a budget's), the card's memory by default.

    XLA's GPU compiler schedules (and rematerialises) to fit a memory limit: the compile's own
    device_memory_size where the client sets it, which the GPU client does from its allocator's
    limit, else SCHEDULER_SHARE of the description's device memory. A compile without a device
    has no client to set it, so the description's memory is the limit scaled up by that share."""
    limit = allocator_limit or c.memory_bytes
    described = -(-limit * SCHEDULER_SHARE[1] // SCHEDULER_SHARE[0])  # ceil(limit / share)
    major, minor = c.compute_capability
    return f"""gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: {c.shared_memory_per_core}
  threads_per_core_limit: {c.threads_per_core_limit}
  core_count: {c.sm_count}
  fpus_per_core: {c.fpus_per_core}
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {c.memory_bandwidth}
  l2_cache_size: {c.l2_cache_bytes}
  clock_rate_ghz: {c.clock_ghz}
  device_memory_size: {described}
  shared_memory_per_block_optin: {c.shared_memory_per_block_optin}
  cuda_compute_capability {{ major: {major} minor: {minor} }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 19 }}
device_description_str: "{c.description}"
"""


def card(name: str) -> Card:
    """The card of that name (UnknownNameError lists the known ones)."""
    return lookup(CARDS, "card", name)


def card_of_device(device_name: str) -> Card | None:
    """The card a GPU record's device_name is (None: not one of ours)."""
    return next((c for c in CARDS.values() if c.device_kind == device_name), None)
