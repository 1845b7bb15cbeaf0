"""Extra frameworks and workloads from other packages: MEMBENCH_PLUGINS names modules
(comma-separated) that call register_*() when imported.

Nothing is imported when the registry is: load_plugins() imports them, at the first lookup
(names.lookup: framework(), workload(), preset(), strategy(), load_backend()) and at the
entry points that read the tables whole (the command line, the asv suite, the recorded
library versions). A worker process inherits the variable, so its first lookup loads the
registry its parent saw.
"""

from __future__ import annotations

import importlib
import os

PLUGINS_ENV = "MEMBENCH_PLUGINS"


class PluginError(RuntimeError):
    """A module MEMBENCH_PLUGINS names cannot be loaded: the message names the variable, the
    module and its error, in one line."""


_loaded: str | None = None  # the value of PLUGINS_ENV whose modules are imported
_loading = False


def load_plugins() -> None:
    """Import the modules PLUGINS_ENV names (once per value of the variable; a module that
    failed to import is tried again, and fails again, at the next call). PluginError where
    one is missing or fails: whatever it raised (a syntax error, a bad registration)."""
    global _loaded, _loading
    raw = os.environ.get(PLUGINS_ENV, "")
    if raw == _loaded or _loading:  # _loading: a plugin's own lookups while it registers
        return
    _loading = True
    try:
        for module in filter(None, (m.strip() for m in raw.split(","))):
            try:
                importlib.import_module(module)
            except Exception as exc:  # the plugin's own code: any error is its author's
                text = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line
                raise PluginError(
                    f"{PLUGINS_ENV}: module {module!r} cannot be loaded: {text}"
                ) from exc
    finally:
        _loading = False
    _loaded = raw
