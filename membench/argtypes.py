"""Command-line value parsers, every one of membench's commands and its module entry points
(which run under a framework's own interpreter: membench modules are imported inside the
parsers that need them, never at import time).
Every number is checked whole: ASCII digits only (int() also reads full-width digits),
finite, within its bounds."""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

# The largest batch any command accepts (capacity's doubling stops there too).
MAX_BATCH = 65_536


def _ascii_int(text: str) -> int | None:
    raw = text.strip()
    return int(raw) if raw.isascii() and raw.isdigit() else None


def positive_int(text: str) -> int:
    value = _ascii_int(text)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def batch_size(text: str) -> int:
    """A positive integer up to MAX_BATCH."""
    value = positive_int(text)
    if value > MAX_BATCH:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BATCH}, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (value > 0 and math.isfinite(value)):  # NaN and infinity too
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def names(text: str) -> list[str]:
    """Comma-separated names, at least one (an empty one is never "all")."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"give at least one name, got {text!r}")
    return names


def name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(f"give a name, got {text!r}")
    return text.strip()


def batch_sizes(text: str) -> list[int]:
    """Comma-separated batch sizes: positive integers (ASCII digits) up to MAX_BATCH."""
    parts = [n.strip() for n in text.split(",") if n.strip()]
    if not all(p.isascii() and p.lstrip("-").isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"batch sizes must be integers, got {text!r}")
    values = [int(p) for p in parts]
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"batch sizes must be positive integers, got {text!r}")
    if any(v > MAX_BATCH for v in values):
        raise argparse.ArgumentTypeError(f"batch sizes must be at most {MAX_BATCH}, got {text!r}")
    return values


def metric_names(text: str) -> list[str]:
    """Comma-separated metric names from the catalogue."""
    from membench.metrics import METRICS
    from membench.registry import UnknownNameError

    found = names(text)
    for metric in found:
        if metric not in METRICS:
            raise argparse.ArgumentTypeError(str(UnknownNameError("metric", metric, list(METRICS))))
    return found


def fraction(low_inclusive: bool) -> Callable[[str], float]:
    """A fraction below 1: in [0, 1) (0 meaning exact) or in (0, 1)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not (0 <= value < 1 if low_inclusive else 0 < value < 1):
            bounds = "[0, 1)" if low_inclusive else "(0, 1)"
            raise argparse.ArgumentTypeError(f"must be a fraction in {bounds}, got {text!r}")
        return value

    return parse


def results_dir(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"no results folder at {text!r}")
    return path


def store_dir(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"no store folder at {text!r}")
    return path


def writable_file(text: str) -> Path:
    """A file path whose folder is (or can be made) writable: checked, nothing written."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write to {text!r}: it is a folder")
    writable_dir(str(path.parent))
    return path


def writable_dir(text: str) -> Path:
    """A folder that exists and is writable, or can be created: checked, not created."""
    path = Path(text)
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write to {text!r}: {probe} is not a folder")
    try:  # a real attempt: permission bits do not tell for root or special file systems
        os.rmdir(tempfile.mkdtemp(dir=probe, prefix=".membench-check-"))
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"cannot write to {text!r}: {probe}: {exc.strerror}"
        ) from None
    return path


def byte_size(text: str) -> float:
    """2GiB, 1500MiB, 3.5GB or a plain number of bytes."""
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 1e3, "mb": 1e6, "gb": 1e9, "b": 1}
    raw = text.strip().lower()
    for unit, factor in units.items():
        if raw.endswith(unit):
            raw, scale = raw[: -len(unit)], factor
            break
    else:
        scale = 1
    try:
        value = float(raw) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 2GiB, 1500MiB)") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"a size must be finite, got {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a budget must be positive, got {text!r}")
    return value


def memory_cap_bytes(text: str) -> float:
    """--memory-cap: a size (e.g. 8GiB) above zero and within the host's memory."""
    from membench.memory_cap import total_bytes

    value = byte_size(text)  # positive and finite
    if value > (total := total_bytes()):
        raise argparse.ArgumentTypeError(
            f"{text!r} is more than this host's {total / 2**30:.1f} GiB: it would cap nothing"
        )
    return value
