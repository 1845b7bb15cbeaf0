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

from membench import argtypes
from membench.env_var import Setting, SettingError

PLUGINS_ENV = "MEMBENCH_PLUGINS"
PLUGINS = Setting(
    PLUGINS_ENV, argtypes.module_names, "module names, comma-separated",
    "modules that register frameworks and workloads", "membench/registry/plugins.py",
)  # fmt: skip


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
    try:
        modules = PLUGINS.value() or []
    except SettingError as exc:
        raise PluginError(str(exc)) from None
    _loading = True
    try:
        for module in modules:
            try:
                importlib.import_module(module)
            # the plugin's own code: any error is its author's, and so is an exit or an
            # interrupt raised while it is imported (a real Ctrl-C there is reported so too)
            except (Exception, SystemExit, KeyboardInterrupt) as exc:
                said = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                text = " ".join(said.split())  # one line
                raise PluginError(
                    f"{PLUGINS_ENV}: module {module!r} cannot be loaded: {text}"
                ) from exc
    finally:
        _loading = False
    _loaded = raw
