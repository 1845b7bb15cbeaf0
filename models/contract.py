"""What a model module (models/<workload>/<framework>_impl.py) provides, written as code.

The backends in membench/backends/ call these names and no others: a common core, one
Protocol per framework on top, and two for what only some workloads have (attention, token
inputs). `violations` checks a module against them (names, the parameters the backends pass,
the constants' types); tests/test_model_contract.py runs it over every (framework, workload)
of the registry. Framework-free: the framework's own types are `Any` here.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np


class ModelModule(Protocol):
    """Every framework's model module."""

    HAS_BATCHNORM: bool  # accumulation's micro-batches then normalise by their own statistics

    def synthetic_batch(
        self, batch_size: int, inputs: dict[str, int], seed: int = 0, /
    ) -> tuple[np.ndarray, np.ndarray]:
        """The workload's batch (inputs, labels) as numpy, channels first: the spec's own."""

    def build(self, inputs: dict[str, int], /, *, checkpoint: bool = False) -> Any:
        """The model at the preset's input sizes, checkpointed per CHECKPOINT_UNIT or not."""

    def loss_fn(self, logits: Any, labels: Any, /) -> Any:
        """The scalar training loss."""


class TorchModelModule(ModelModule, Protocol):
    CHECKPOINT_UNIT: str  # what one checkpoint wraps, for the record's notes

    def make_optimizer(self, params: Iterable[Any], /) -> Any:
        """A torch.optim optimizer over the parameters."""


class FlaxModelModule(ModelModule, Protocol):
    CHECKPOINT_UNIT: str

    def build(
        self,
        inputs: dict[str, int],
        /,
        *,
        checkpoint: bool = False,
        dtype: Any = None,
        param_dtype: Any = None,
    ) -> Any:
        """A linen Module computing in dtype with parameters stored in param_dtype."""

    def init_variables(
        self, model: Any, batch_size: int, inputs: dict[str, int], seed: Any = 0, /
    ) -> dict:
        """{"params": ..., "batch_stats": ... (models with BatchNorm)}; seed: an int or a PRNG
        key (jitted re-initialisation of a second model)."""

    def input_layout(self, inputs: np.ndarray, /) -> np.ndarray:
        """synthetic_batch's inputs in the model's layout (channels last where it has any)."""

    def make_optimizer(self) -> Any:
        """An optax GradientTransformation."""

    def from_torch(self, state: dict[str, np.ndarray], /) -> dict:
        """The torch model's state_dict (numpy) as this model's variables (parity tests)."""


class JittorModelModule(ModelModule, Protocol):
    """Names and layouts follow torch_impl's, so one converter serves every workload
    (membench.backends.jittor_backend.from_torch); Jittor has no checkpointing."""

    def make_optimizer(self, params: list[Any], /) -> Any:
        """A jittor.optim optimizer over the parameters."""


class WithAttention(Protocol):
    """Where the workload has attention (registry.Workload.attention)."""

    ATTENTION: dict[str, str]  # every attention kind the backend runs -> what it computes

    def build(self, inputs: dict[str, int], /, *, attention: str = "plain") -> Any:
        """The model with the attention kind asked for."""


class WithFusedAttentionKernel(Protocol):
    """Flax, where fused attention runs: which kernel XLA picks."""

    def attention_implementation(self, dtype: Any, platform: str, /) -> str: ...


class WithTokenInputs(Protocol):
    """Jittor, where the inputs are integers: its amp computes in low precision only where an
    input is, so the model casts its first float activation itself."""

    def build(self, inputs: dict[str, int], /, *, compute_dtype: str | None = None) -> Any: ...


FRAMEWORK_CONTRACTS: dict[str, type] = {
    "torch": TorchModelModule,
    "jax": FlaxModelModule,
    "jittor": JittorModelModule,
}


def members(protocol: type) -> tuple[dict[str, Any], dict[str, inspect.Signature]]:
    """A protocol's constants (name -> type) and functions (name -> signature without self),
    the most derived declaration of each."""
    constants: dict[str, Any] = {}
    functions: dict[str, inspect.Signature] = {}
    for cls in reversed(protocol.__mro__):
        if cls in (object, Protocol, typing.Generic) or not getattr(cls, "_is_protocol", False):
            continue
        constants.update(typing.get_type_hints(cls))
        for name, value in vars(cls).items():
            if isinstance(value, types.FunctionType) and not name.startswith("_"):
                sig = inspect.signature(value)
                functions[name] = sig.replace(parameters=list(sig.parameters.values())[1:])
    return constants, functions


def _type_ok(value: object, expected: Any) -> bool:
    origin = typing.get_origin(expected) or expected
    if not isinstance(value, origin):
        return False
    if origin is dict and (args := typing.get_args(expected)):
        return all(_type_ok(k, args[0]) and _type_ok(v, args[1]) for k, v in value.items())
    return True


def _signature_problems(name: str, got: inspect.Signature, wanted: inspect.Signature) -> list[str]:
    """What keeps a backend's call from working. The backends pass the parameters before `/`
    by position (any name) and those after `*` by name; a module may take more, with defaults."""
    have = list(got.parameters.values())
    positional = [p for p in have if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_args = any(p.kind is p.VAR_POSITIONAL for p in have)
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in have)
    problems, used = [], set()
    for i, param in enumerate(wanted.parameters.values()):
        if param.kind is param.POSITIONAL_ONLY:
            mine = positional[i] if i < len(positional) else None
            if mine is None and not takes_args:
                problems.append(f"{name}() takes no parameter {i + 1} ({param.name})")
        else:
            mine = got.parameters.get(param.name)
            if mine is not None and mine.kind is mine.POSITIONAL_ONLY:
                mine = None
            if mine is None and not takes_kwargs:
                problems.append(f"{name}() lacks parameter {param.name!r}")
        if mine is None:
            continue
        used.add(mine.name)
        if param.default is not param.empty and mine.default is mine.empty:
            problems.append(f"{name}(): {mine.name!r} needs a default")
    for param in have:
        required = param.default is param.empty and param.kind not in (
            param.VAR_POSITIONAL, param.VAR_KEYWORD,
        )  # fmt: skip
        if required and param.name not in used:
            problems.append(f"{name}() requires {param.name!r}, which no backend passes")
    return problems


def violations(module: types.ModuleType, *protocols: type) -> list[str]:
    """How a module falls short of the protocols (empty: it conforms)."""
    problems = []
    for protocol in protocols:
        constants, functions = members(protocol)
        for name, expected in constants.items():
            if not hasattr(module, name):
                problems.append(f"{protocol.__name__}: {name} missing")
            elif not _type_ok(getattr(module, name), expected):
                found = type(getattr(module, name)).__name__
                problems.append(f"{protocol.__name__}: {name} is {found}, not {expected}")
        for name, wanted in functions.items():
            fn = getattr(module, name, None)
            if not callable(fn):
                problems.append(f"{protocol.__name__}: {name}() missing")
                continue
            found = _signature_problems(name, inspect.signature(fn), wanted)
            problems += [f"{protocol.__name__}: {p}" for p in found]
    return problems
