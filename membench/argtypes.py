"""Command-line value parsers shared by membench's commands and its module entry points
(which run under a framework's own interpreter, so nothing here imports beyond argparse)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value
