"""A name that is not in a table of names (a registry's, the metrics' catalogue): one error that
lists the valid ones. Imports nothing of membench: the flags' and settings' parsers raise it
too (membench.argtypes), below the registry.
"""

from __future__ import annotations

import difflib

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
