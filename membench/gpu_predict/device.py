"""A GPU machine's card as its own frameworks read it, held against the description the
predictions use (cards.py, from published specifications): `membench gpu-predict
--describe-card` on the GPU machine (scripts/gpu_checks.sh runs it once per machine) writes
results/devices/<machine>/card.json, which the GPU run packs and a CPU host commits.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from membench.gpu_predict.cards import Card
from membench.paths import REPO_ROOT

# the framework helpers that read the card (each prints one JSON line)
READERS = {
    "torch": "membench.backends.torch_backend.device_facts",
    "jax": "membench.backends.jax_backend.device_facts",
}
TIMEOUT = 120.0


def read_card() -> dict[str, Any]:
    """What NVML, torch and XLA say of this machine's first GPU (each framework's answer with
    its status: a framework that cannot see it says why)."""
    from membench.environment import gpu_info
    from membench.interpreters import InterpreterError, framework_python

    found: dict[str, Any] = {
        "nvml": gpu_info(),
        "read_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    for framework, module in READERS.items():
        try:
            python = framework_python(framework)
            done = subprocess.run(
                [python, "-W", "ignore", "-m", module], capture_output=True, text=True,
                timeout=TIMEOUT, env=env, cwd=REPO_ROOT,
            )  # fmt: skip
            found[framework] = json.loads(done.stdout.strip().splitlines()[-1])
        except (InterpreterError, subprocess.TimeoutExpired, IndexError, ValueError) as exc:
            found[framework] = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"[:300]}
    return found


def differences(card: Card, read: dict[str, Any]) -> list[str]:
    """Where the card's description differs from what the card itself said (empty: agrees
    on every fact that was read)."""
    cuda = read.get("torch", {}).get("cuda") or {}
    xla = read.get("jax", {}).get("xla") or {}
    nvml = read.get("nvml") or {}
    capability = (cuda.get("major"), cuda.get("minor"))
    pairs = [
        ("memory (NVML's total)", card.memory_bytes, nvml.get("gpu_memory_bytes")),
        ("memory (CUDA's total)", card.cuda_total_bytes, cuda.get("total_memory")),
        ("streaming multiprocessors (CUDA)", card.sm_count, cuda.get("multi_processor_count")),
        ("streaming multiprocessors (XLA)", card.sm_count, xla.get("core_count")),
        ("compute capability", card.compute_capability, None if None in capability else capability),
        ("L2 cache", card.l2_cache_bytes, cuda.get("L2_cache_size")),
        ("shared memory per SM", card.shared_memory_per_core,
         cuda.get("shared_memory_per_multiprocessor")),
        ("shared memory a block may opt in to", card.shared_memory_per_block_optin,
         cuda.get("shared_memory_per_block_optin")),
        ("threads per SM", card.threads_per_core_limit,
         cuda.get("max_threads_per_multi_processor")),
    ]  # fmt: skip
    return [
        f"{what}: described {mine}, the card says {theirs}"
        for what, mine, theirs in pairs
        if theirs is not None and mine is not None and tuple_or(mine) != tuple_or(theirs)
    ]


def tuple_or(value: Any) -> Any:
    return tuple(value) if isinstance(value, list | tuple) else value


def save(read: dict[str, Any], path: Path) -> None:
    from membench.records import write_json_atomic

    write_json_atomic(path, read)
