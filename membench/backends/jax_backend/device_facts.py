"""The GPU as XLA sees it (the device's attributes, its allocator's limit, its topology as
XLA serialises it): what a compile for the card's target without the card is told of it, read
from the card itself (membench gpu-predict --describe-card).

    python -m membench.backends.jax_backend.device_facts

prints one JSON line; unsupported where JAX has no CUDA device (JAX_PLATFORMS=cuda: a plugin
that fails to start raises instead of falling back to the CPU).
"""

from __future__ import annotations

import base64
import os
import sys
from typing import Any

from membench.backends.declarations import Unsupported

ATTRIBUTES = ("device_kind", "compute_capability", "core_count", "platform_version")


def device_facts() -> dict[str, Any]:
    os.environ.setdefault("JAX_PLATFORMS", "cuda")
    import jax

    try:
        device = jax.devices("cuda")[0]
    except Exception as exc:  # a CPU-only jaxlib fails in its own ways (RuntimeError, assert)
        raise Unsupported(f"JAX has no CUDA device here ({exc})"[:300]) from None
    facts: dict[str, Any] = {a: _text(getattr(device, a, None)) for a in ATTRIBUTES}
    facts["bytes_limit"] = (device.memory_stats() or {}).get("bytes_limit")
    from jax._src.lib import xla_client

    topology = xla_client.get_topology_for_devices([device])
    # the description a deviceless compile takes (GpuTargetConfig) where this jaxlib exposes
    # it; else the topology's serialised form, for the suite's description to be checked by
    target = getattr(topology, "target_config", None)
    facts["target_config"] = _text(target)
    facts["topology"] = base64.b64encode(topology.serialize()).decode()
    return {"xla": facts}


def _text(value: Any) -> Any:
    return value if value is None or isinstance(value, int | float) else str(value)


def main() -> int:
    from membench.backends.answer_line import print_answer, version_of

    return print_answer(device_facts, version_of("jax"))


if __name__ == "__main__":
    sys.exit(main())
