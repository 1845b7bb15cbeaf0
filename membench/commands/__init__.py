"""The membench commands, one module each: `add_parser(sub)` declares its arguments and sets
`func`, the function that runs it (most are `main(args)`). COMMANDS is the order `membench
--help` lists them in; membench.cli parses and dispatches."""

from __future__ import annotations

import argparse
import importlib

from membench.commands.common import Parser

COMMANDS = (
    "listing", "run", "bench", "versions", "capacity", "calibrate", "predict", "plan", "archive",
    "compare", "report", "selfcheck", "show",
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="membench", description="Memory and speed of deep-learning frameworks.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name in COMMANDS:
        importlib.import_module(f"membench.commands.{name}").add_parser(sub)
    return parser
