"""Names that are not in a registry: one error that lists the valid ones."""

from __future__ import annotations

from membench.registry.plugins import load_plugins


class UnknownNameError(ValueError):
    """A name that is not in a registry; the message lists the valid ones."""

    def __init__(self, kind: str, name: str, valid: list[str]):
        self.kind, self.name, self.valid = kind, name, valid
        super().__init__(f"unknown {kind} {name!r}; valid {kind} names: {', '.join(valid)}")


def lookup(table: dict, kind: str, name: str):
    """table[name] (the plugins loaded first: membench.registry.plugins)."""
    load_plugins()
    if name not in table:
        raise UnknownNameError(kind, name, list(table))
    return table[name]
