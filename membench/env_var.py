"""One MEMBENCH_ environment variable declared: its name, how its value is read (a parser of
membench.argtypes, the same as a flag's), what it sets and who reads it, and the reading
itself. A variable is declared beside the code that reads it where that code sits below the
table (the registry's plugins, the selfcheck's image size, the frameworks' interpreters);
membench.settings gathers every declaration into the one table.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class SettingError(ValueError):
    """A MEMBENCH_ variable whose value cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str], Any]
    kind: str  # the value's form, for the docs
    means: str
    read_by: str  # the module (or script) that reads it, or that sets it for workers

    def value(self, environ: Mapping[str, str] | None = None, name: str | None = None) -> Any:
        """The variable's value as its parser reads it (name: the variable read under this
        declaration, where it declares a family, MEMBENCH_PYTHON_<FRAMEWORK>); None where it
        is unset or empty. SettingError (one line) where the parser refuses it."""
        name = name or self.name
        raw = (os.environ if environ is None else environ).get(name, "")
        if not raw.strip():
            return None
        try:
            return self.parse(raw)
        except argparse.ArgumentTypeError as exc:
            raise SettingError(f"{name}={raw!r}: {exc}") from None
