"""Names that are not in a registry: one error that lists the valid ones."""

from __future__ import annotations

import difflib

from membench.registry.plugins import load_plugins

# the most valid names an unknown name's message lists (more: the closest ones)
LISTED_NAMES = 40
CLOSEST = 8  # the closest names said instead


class UnknownNameError(ValueError):
    """A name that is not in a registry; the message lists the valid ones."""

    def __init__(self, kind: str, name: str, valid: list[str]):
        self.kind, self.name, self.valid = kind, name, valid
        if len(valid) <= LISTED_NAMES:
            listed = f"valid {kind} names: {', '.join(valid)}"
        else:  # a catalogue (metrics) as one line of thousands of characters helps nobody
            within = [v for v in valid if name and name in v]  # `peak`: the peak_* metrics
            close = list(dict.fromkeys(
                [*difflib.get_close_matches(name, valid, n=5, cutoff=0.5), *within]
            ))[:CLOSEST]  # fmt: skip
            listed = f"{len(valid)} valid {kind} names" + (
                f", the closest: {', '.join(close)}" if close else ", none close to it"
            )
        super().__init__(f"unknown {kind} {name!r}; {listed}")


def lookup(table: dict, kind: str, name: str):
    """table[name] (the plugins loaded first: membench.registry.plugins)."""
    load_plugins()
    if name not in table:
        raise UnknownNameError(kind, name, list(table))
    return table[name]
