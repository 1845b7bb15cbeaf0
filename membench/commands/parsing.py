"""The command line's parser and its refusals: the console the commands print on, BadInput
and fail (a refusal: one line on stderr, exit status 2), Parser (bad arguments refused so,
before any work) and ExtendUnique (a repeatable list option)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console

console = Console(width=160)


class BadInput(ValueError):
    """Input refused before any work, found after parsing (main: one line, exit 2)."""


def fail(message: str, prog: str = "membench") -> int:
    """A refusal: one line on stderr, exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


class ExtendUnique(argparse.Action):
    """A repeatable list option (`-s a,b -s b`): the values in the order given, each once, so
    that a name given twice is one cell, not two."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,  # a list: what the option's type returned
        option_string: str | None = None,
    ) -> None:
        given = [*(getattr(namespace, self.dest, None) or []), *(values or [])]
        setattr(namespace, self.dest, list(dict.fromkeys(given)))


class Parser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr and exit 2, before any work."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        given = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(joined_negative_values(given), namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


# A value that starts with a minus and a digit ("-1GiB", "-.5"): argparse takes it after a
# long option for an option of its own and refuses the option as lacking its argument.
_NEGATIVE = re.compile(r"-\.?\d")


def joined_negative_values(argv: list[str]) -> list[str]:
    """argv with each such value joined to the long option before it (--budget=-1GiB), so
    that the option's own type refuses it, saying why; nothing after a bare "--"."""
    out: list[str] = []
    for i, token in enumerate(argv):
        if token == "--":
            return out + argv[i:]
        option = out[-1] if out else ""
        if option.startswith("--") and "=" not in option and _NEGATIVE.match(token):
            out[-1] = f"{option}={token}"
        else:
            out.append(token)
    return out
