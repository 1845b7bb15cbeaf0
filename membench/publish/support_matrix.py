"""The framework x strategy table, read off each backend's declared support.

`membench list --matrix` prints it and docs/methodology.md's strategy table is this module's
Markdown (a test holds them equal). No framework is imported: declarations are class attributes.
"""

from __future__ import annotations

from collections.abc import Sequence

from membench import registry
from membench.backends import DEVICES, Backend, Implemented

DEVICE_NAMES = {"cpu": "CPU", "cuda": "CUDA"}


def changed_knobs(strategy: registry.Strategy) -> dict[str, object]:
    """The knobs a strategy sets away from the baseline's values."""
    defaults = registry.knob_defaults()
    return {k: v for k, v in strategy.knobs().items() if v != defaults[k]}


def cell_text(backend: type[Backend], strategy: registry.Strategy) -> str:
    """How a backend runs a strategy, or why not, on every device it knows."""
    refusals = {d: backend.strategy_refusal(strategy, d) for d in DEVICES}
    if all(refusals.values()) and len(set(refusals.values())) == 1:
        return f"unsupported: {refusals[DEVICES[0]]}"
    knobs = changed_knobs(strategy)
    entries = [backend.declared(k, v) for k, v in knobs.items()] or [Implemented(backend.baseline)]
    text = "; ".join(e.how for e in entries if isinstance(e, Implemented))
    refused = {d: r for d, r in refusals.items() if r}
    if refused:
        where = ", ".join(DEVICE_NAMES[d] for d in DEVICES if d not in refused)
        reason = next(iter(refused.values()))
        text += f" ({where} only; elsewhere unsupported: {reason})"
    return text


def backend_class(framework: str) -> type[Backend]:
    return type(registry.load_backend(framework))


def matrix(frameworks: Sequence[str] | None = None) -> list[dict[str, str]]:
    """One row per strategy: its name, the knobs it changes, and each framework's cell."""
    names = list(frameworks or registry.FRAMEWORKS)
    backends = {f: backend_class(f) for f in names}
    rows = []
    for s in registry.STRATEGIES.values():
        knobs = ", ".join(f"{k}={v}" for k, v in changed_knobs(s).items()) or "(baseline)"
        row = {"strategy": s.name, "knobs": knobs}
        row.update({f: cell_text(b, s) for f, b in backends.items()})
        rows.append(row)
    return rows


def markdown(frameworks: Sequence[str] | None = None) -> str:
    """The matrix as a Markdown table (docs/methodology.md's strategy table)."""
    rows = matrix(frameworks)
    names = list(frameworks or registry.FRAMEWORKS)
    headers = ["strategy", "knobs", *(registry.framework(f).description for f in names)]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        cells = [f"`{row['strategy']}`", row["knobs"], *(row[f] for f in names)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
