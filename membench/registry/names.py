"""A registry's lookup by name: the plugins loaded first, an unknown name refused with the valid
ones (membench.unknown_names)."""

from __future__ import annotations

from membench.registry.plugins import load_plugins
from membench.unknown_names import UnknownNameError


def lookup(table: dict, kind: str, name: str):
    """table[name] (the plugins loaded first: membench.registry.plugins)."""
    load_plugins()
    if name not in table:
        raise UnknownNameError(kind, name, list(table))
    return table[name]
