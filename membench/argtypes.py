"""Command-line value parsers shared by membench's commands and its module entry points
(which run under a framework's own interpreter, so nothing here imports beyond argparse).
Every number is checked whole: ASCII digits only (int() also reads full-width digits),
finite, within its bounds."""

from __future__ import annotations

import argparse
import math

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
