"""The one JSON line a backend's helper process prints (a compile-only report, a GPU
prediction), whatever happened: its answer with status ok, or unsupported or error with the
reason, and the exit status saying which."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from membench.backends.declarations import Unsupported


def version_of(module: str) -> Callable[[], str]:
    """The framework's version, read when asked (its import may be what fails)."""

    def version() -> str:
        import importlib

        return importlib.import_module(module).__version__

    return version


def print_answer(
    compute: Callable[[], dict[str, Any]], version: Callable[[], str] | None = None
) -> int:
    """Print compute()'s answer as one JSON line (with the framework's version where given);
    0 where it is ok, else 1."""
    try:
        result = compute()
    except Unsupported as exc:
        result = {"status": "unsupported", "reason": str(exc)}
    except Exception as exc:  # one line the caller reads whatever happened
        result = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"[:2000]}
    else:
        result["status"] = "ok"
    if version is not None:
        try:
            result["framework_version"] = version()
        except ImportError:  # the framework itself is what is missing: the reason says so
            pass
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0 if result["status"] == "ok" else 1
