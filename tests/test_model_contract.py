"""Every model module of the registry against models/contract.py: one check per (framework,
workload). Each framework's modules are imported in a process of their own (Jittor through
import_into_host_process, after torch: their oneDNN builds clash the other way round)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import types
import typing

import numpy as np
import pytest

from membench import registry
from membench.backends import Implemented
from models.contract import (
    FRAMEWORK_CONTRACTS,
    WithAttention,
    WithFusedAttentionKernel,
    WithTokenInputs,
    violations,
)

from .conftest import REPO

# every registered framework's model modules (a framework with modules but no contract in
# FRAMEWORK_CONTRACTS fails test_every_framework_with_models_has_a_contract, not skipped)
PAIRS = [
    (framework, name)
    for framework in registry.FRAMEWORKS
    for name, wl in registry.WORKLOADS.items()
    if framework in wl.model_modules
]


def protocols(framework: str, workload: str, integer_inputs: bool) -> list[type]:
    """The contract of one module: its framework's, and what its workload adds."""
    found = [FRAMEWORK_CONTRACTS[framework]]
    if registry.workload(workload).attention:
        found.append(WithAttention)
        fused = registry.load_backend(framework).declared("attention", "fused")
        if framework == "jax" and isinstance(fused, Implemented):
            found.append(WithFusedAttentionKernel)
    if framework == "jittor" and integer_inputs:
        found.append(WithTokenInputs)
    return found


def _batch_problems(module: types.ModuleType, workload: str) -> tuple[list[str], bool]:
    """synthetic_batch returns (inputs, labels) as numpy arrays of the batch; and whether
    its inputs are integers (token ids)."""
    inputs = registry.preset("smoke").size(workload).inputs
    x, y = module.synthetic_batch(2, dict(inputs), 0)
    if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)):
        return ["synthetic_batch returns no numpy arrays"], False
    if len(x) != 2 or len(y) != 2:
        return ["synthetic_batch's arrays do not lead with the batch"], False
    return [], np.issubdtype(x.dtype, np.integer)


def _attention_problems(module: types.ModuleType, framework: str) -> list[str]:
    """ATTENTION names every attention kind the backend runs (the record's notes read it)."""
    backend = registry.load_backend(framework)
    run = [
        v
        for v in typing.get_args(registry.Attention)
        if not isinstance(backend.declared("attention", v), str)
    ]
    return [f"ATTENTION lacks {v!r}" for v in run if v not in getattr(module, "ATTENTION", {})]


def check(framework: str) -> dict[str, list[str]]:
    """workload -> how its module falls short (run in a process of this framework only)."""
    if framework == "jittor":
        import torch  # noqa: F401 - before jittor

        from membench.backends.jittor_backend import import_into_host_process

        import_into_host_process("cpu")
    out = {}
    for fw, workload in PAIRS:
        if fw != framework:
            continue
        module = importlib.import_module(registry.workload(workload).model_modules[framework])
        problems, integer_inputs = _batch_problems(module, workload)
        problems += violations(module, *protocols(framework, workload, integer_inputs))
        if registry.workload(workload).attention:
            problems += _attention_problems(module, framework)
        out[workload] = problems
    return out


@pytest.fixture(scope="module")
def checked():
    """framework -> workload -> problems, each framework checked once, in its own process."""
    done: dict[str, dict[str, list[str]]] = {}

    def of(framework: str) -> dict[str, list[str]]:
        if framework not in done:
            cmd = [sys.executable, "-m", "tests.test_model_contract", framework]
            out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, out.stderr[-3000:]
            done[framework] = json.loads(out.stdout.strip().splitlines()[-1])
        return done[framework]

    return of


@pytest.mark.parametrize(("framework", "workload"), PAIRS, ids=[f"{f}-{w}" for f, w in PAIRS])
def test_the_model_module_meets_the_contract(framework, workload, checked):
    if not registry.framework_installed(framework):
        pytest.skip(f"{framework} is not installed")
    assert checked(framework)[workload] == []


def test_every_framework_with_models_has_a_contract():
    """A framework's model modules are checked against its Protocol in models/contract.py:
    one without an entry in FRAMEWORK_CONTRACTS would have its modules go unchecked."""
    assert {f for f, _ in PAIRS} <= set(FRAMEWORK_CONTRACTS)


def test_the_check_names_what_is_missing_or_misplaced():
    module = types.ModuleType("broken")
    module.HAS_BATCHNORM = "yes"
    module.CHECKPOINT_UNIT = "per block"
    module.synthetic_batch = lambda batch_size, inputs, seed=0: None  # any names: by position
    module.build = lambda inputs, checkpoint, extra: None
    module.loss_fn = lambda logits: None
    found = violations(module, FRAMEWORK_CONTRACTS["torch"])
    assert found == [
        "TorchModelModule: HAS_BATCHNORM is str, not <class 'bool'>",
        "TorchModelModule: build(): 'checkpoint' needs a default",
        "TorchModelModule: build() requires 'extra', which no backend passes",
        "TorchModelModule: loss_fn() takes no parameter 2 (labels)",
        "TorchModelModule: make_optimizer() missing",
    ]


if __name__ == "__main__":  # one framework's check, as JSON (the fixture's subprocess)
    print(json.dumps(check(sys.argv[1])))
