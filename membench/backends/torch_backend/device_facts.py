"""The GPU as torch sees it (CUDA's device properties, cuDNN's version): what a prediction's
card description says of it, read from the card itself (membench gpu-predict --describe-card).

    python -m membench.backends.torch_backend.device_facts

prints one JSON line; unsupported where torch sees no CUDA device.
"""

from __future__ import annotations

import sys
from typing import Any

from membench.backends.declarations import Unsupported

# CUDA's device properties a card description holds (torch's names)
PROPERTIES = (
    "name", "total_memory", "multi_processor_count", "major", "minor", "L2_cache_size",
    "max_threads_per_multi_processor", "shared_memory_per_multiprocessor",
    "shared_memory_per_block_optin", "warp_size",
)  # fmt: skip


def device_facts() -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        raise Unsupported("torch sees no CUDA device here")
    props = torch.cuda.get_device_properties(0)
    facts = {name: getattr(props, name, None) for name in PROPERTIES}
    free, total = torch.cuda.mem_get_info()
    return {"cuda": facts | {"mem_get_info_total": total}, "cudnn": torch.backends.cudnn.version()}


def main() -> int:
    from membench.backends.answer_line import print_answer, version_of

    return print_answer(device_facts, version_of("torch"))


if __name__ == "__main__":
    sys.exit(main())
