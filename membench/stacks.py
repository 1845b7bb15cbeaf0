"""A framework version as the suite names it: a pinned pip spec (jax==0.7.1 ...) and its
label (jax-0.7.1). The label is read from the spec alone (`analysis` names environments with
it, without the registry); the version matrix (membench.releases.versions) also checks the
framework.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEVICE_KINDS = ("cpu", "gpu")
# name==version, or name===version: pip's exact string match, which keeps a public release
# (torch===2.13.0, the registry's default build) apart from a local build (2.13.0+cpu)
_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)===?([A-Za-z0-9_.+\-]+)$")


class VersionsFileError(ValueError):
    """A line of the versions file that cannot be used; the message names file and line."""


@dataclass(frozen=True)
class Stack:
    """One environment: a pinned framework and the packages it is measured with."""

    spec: str  # the pip requirements, space-separated, framework first
    devices: tuple[str, ...]
    framework: str  # the membench framework name
    version: str  # the framework's pinned version

    @property
    def label(self) -> str:
        """jax-0.7.1: how version stores, records and `membench compare` name the environment
        (stack_label of its spec: the name analysis reads back from a record)."""
        return stack_label(self.spec)


def stack_label(spec: str) -> str:
    """The label of a spec read from the spec alone, as `analysis` names environments: its
    first requirement's distribution and version (a framework's label wherever its
    distribution is its name, as for all three; a spec not starting with a pin keeps that
    requirement as written)."""
    first = spec.split()[0] if spec.split() else ""
    match = _PIN.match(first)
    return f"{match[1].lower()}-{match[2]}" if match else first


def framework_of_distribution(distribution: str) -> str:
    from membench import registry  # the label needs no registry; only this check does

    for framework in registry.FRAMEWORKS.values():
        if framework.distribution == distribution.lower():
            return framework.name
    valid = [f.distribution for f in registry.FRAMEWORKS.values()]
    raise registry.UnknownNameError("framework distribution", distribution, valid)


def parse_stack(spec: str, devices: tuple[str, ...] = DEVICE_KINDS) -> Stack:
    """A Stack from a spec whose first requirement pins the framework (jax==0.7.1 ...)."""
    first = spec.split()[0] if spec.split() else ""
    match = _PIN.match(first)
    if not match:
        raise VersionsFileError(
            f"the first requirement must pin the framework exactly (name==version or "
            "name===version): "
            f"{spec!r}"
        )
    return Stack(" ".join(spec.split()), devices, framework_of_distribution(match[1]), match[2])
