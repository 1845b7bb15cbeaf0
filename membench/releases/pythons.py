"""Which Python a release's environment is built on.

A release says which interpreters it supports (its Requires-Python, as the package index
serves it: jax 0.11 needs 3.12 or newer). Its environment is built on the project's own
interpreter where that is allowed, else on the oldest interpreter found that is; a versions
line may name one (`python==3.12`: a bridge, the release measured on the interpreter of the
release after it). Interpreters are found where people keep them: MEMBENCH_PYTHON_3_12-style
settings, `python3.12` on PATH, pyenv's versions. A release no interpreter here can run is
unsupported, with the reason, never an error.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from membench.interpreters import ENV_PREFIX as PYTHON_PREFIX
from membench.interpreters import PYTHON
from membench.stacks import Stack

INDEX = "https://pypi.org/simple"  # PEP 691's JSON form of pip's default index
CANDIDATES = tuple(f"3.{minor}" for minor in range(9, 16))


class NoInterpreter(RuntimeError):
    """No interpreter found here runs the release: its cells are unsupported, with this."""


@dataclass(frozen=True)
class Choice:
    python: str  # "3.12"
    path: str
    why: str  # "the project's own", "Requires-Python >=3.12", "named by the line"


def own() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def variable(minor: str) -> str:
    """The setting naming an interpreter: 3.12 -> MEMBENCH_PYTHON_3_12."""
    return PYTHON_PREFIX + minor.replace(".", "_")


def found_pythons(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every interpreter found, by minor version ("3.12" -> path): the project's own, each
    MEMBENCH_PYTHON_3_X setting, python3.X on PATH, then pyenv's versions (newest patch)."""
    environ = os.environ if environ is None else environ
    found = {own(): sys.executable}
    pyenv = Path(environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    for minor in CANDIDATES:
        if minor in found:
            continue
        named = PYTHON.value(environ, name=variable(minor))  # checked: it runs Python 3
        places = [str(named)] if named else []
        places.append(shutil.which(f"python{minor}", path=environ.get("PATH")) or "")
        places += [str(p / "bin" / "python") for p in _pyenv_versions(pyenv, minor)]
        for place in places:
            if place and minor_of(place) == minor:
                found[minor] = place
                break
    return found


def _pyenv_versions(root: Path, minor: str) -> list[Path]:
    if not root.is_dir():
        return []
    mine = [p for p in root.iterdir() if p.name.startswith(minor + ".")]
    return sorted(mine, key=lambda p: _patch(p.name), reverse=True)


def _patch(name: str) -> tuple:
    try:
        return (0, Version(name))
    except ValueError:
        return (1, name)


def minor_of(python: str) -> str | None:
    """The interpreter's "3.X", or None where it does not run."""
    probe = "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"
    try:
        done = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True,
                              timeout=60)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def requires_python(distribution: str, version: str, index: str = INDEX) -> str:
    """The release's Requires-Python as the index serves it ("" where it states none), read
    from the index's JSON page of the distribution (PEP 691)."""
    request = urllib.request.Request(
        f"{index.rstrip('/')}/{distribution}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        files = json.load(answer)["files"]
    return release_requirement(files, distribution, version)


def release_requirement(files: list[dict], distribution: str, version: str) -> str:
    """The Requires-Python of a release's files in an index page (PEP 691's "files")."""
    names = {distribution.lower(), distribution.lower().replace("-", "_")}
    starts = tuple(f"{n}-{version}{end}" for n in names for end in ("-", ".tar", ".zip"))
    for file in files:
        if str(file.get("filename", "")).lower().startswith(starts):
            return str(file.get("requires-python") or "")
    raise LookupError(f"the index serves no file of {distribution} {version}")


def preferred(minors: list[str], mine: str | None = None) -> str:
    """Among the interpreters a release allows, the one its environment gets: the project's
    own, else the oldest (its minors oldest first)."""
    mine = mine or own()
    return mine if mine in minors else minors[0]


def choose(
    requirement: str, found: Mapping[str, str], named: str | None = None, mine: str | None = None
) -> Choice:
    """The interpreter a release's environment is built on: the one the line names, else
    the project's own where the release allows it, else the oldest found that it allows.
    NoInterpreter says why none will do."""
    mine = mine or own()
    if named:
        if named not in found:
            raise NoInterpreter(
                f"the line names Python {named}, not found here (looked for "
                f"{variable(named)}, python{named} on PATH and pyenv's versions)"
            )
        return Choice(named, found[named], "named by the line")
    try:
        allowed = SpecifierSet(requirement or "")
    except InvalidSpecifier:
        allowed = SpecifierSet()  # an unreadable requirement: pip will judge
    ordered = sorted(found, key=Version)
    if allowed_here := [m for m in ordered if Version(m) in allowed]:
        minor = preferred(allowed_here, mine)
        why = "the project's own" if minor == mine else f"Requires-Python {requirement}"
        return Choice(minor, found[minor], why)
    raise NoInterpreter(
        f"the release requires Python {requirement}; found here only "
        f"{', '.join(ordered)} (name one with {variable('3.X')}, or put python3.X on PATH)"
    )


def choose_for(stack: Stack, found: Mapping[str, str] | None = None) -> Choice:
    """The interpreter of a release's environment, its Requires-Python read from the index
    (NoInterpreter where none found will do; an index that cannot be asked leaves the
    project's own interpreter, for pip to judge)."""
    found = found_pythons() if found is None else found
    if stack.python:
        return choose("", found, stack.python)
    from membench import registry

    distribution = registry.framework(stack.framework).distribution
    try:
        requirement = requires_python(distribution, stack.version.split("+")[0])
    except (OSError, ValueError, LookupError):
        requirement = ""
    return choose(requirement, found)
