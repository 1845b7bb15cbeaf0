"""A framework version as the suite names it: a pinned pip spec (jax==0.7.1 ...) and its
label (jax-0.7.1). The label is read from the spec alone (`analysis` names environments with
it, without the registry); the version matrix (membench.releases.versions) also checks the
framework.

A spec may name the interpreter its environment is built on (`python==3.12`, anywhere after
the framework's pin): the release measured on another Python than its own choice, a bridge
between releases that need different interpreters (jax-0.10.2-py3.12). Without it the
release's own Requires-Python chooses (membench.releases.pythons).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEVICE_KINDS = ("cpu", "gpu")
# name==version, or name===version: pip's exact string match, which keeps a public release
# (torch===2.13.0, the registry's default build) apart from a local build (2.13.0+cpu)
_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)===?([A-Za-z0-9_.+\-]+)$")
_PYTHON = re.compile(r"^python==(3\.\d+)$")  # the interpreter a spec names: python==3.12


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

    @property
    def python(self) -> str | None:
        """The interpreter the spec names ("3.12"), None where its Requires-Python chooses."""
        return spec_python(self.spec)

    @property
    def requirements(self) -> list[str]:
        """What pip installs: the spec without the interpreter it names."""
        return [r for r in self.spec.split() if not _PYTHON.match(r)]


def stack_label(spec: str) -> str:
    """The label of a spec read from the spec alone, as `analysis` names environments: its
    first requirement's distribution and version (a framework's label wherever its
    distribution is its name, as for all three; a spec not starting with a pin keeps that
    requirement as written)."""
    first = spec.split()[0] if spec.split() else ""
    match = _PIN.match(first)
    label = f"{match[1].lower()}-{match[2]}" if match else first
    python = spec_python(spec)
    return f"{label}-py{python}" if python else label


def spec_python(spec: str) -> str | None:
    """The interpreter a spec names (python==3.12 -> "3.12"), else None."""
    found = [m[1] for m in map(_PYTHON.match, spec.split()) if m]
    return found[0] if found else None


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
    named = [r for r in spec.split() if re.match(r"(?i)^python[=<>~!]", r)]  # not python-x
    if len(named) > 1 or any(not _PYTHON.match(r) for r in named):
        raise VersionsFileError(
            f"an interpreter is named once, as python==3.X (e.g. python==3.12): {spec!r}"
        )
    return Stack(" ".join(spec.split()), devices, framework_of_distribution(match[1]), match[2])
