"""The one rule for every file membench finds, reads or writes itself (a store's lock, logs
and records, results files, archives): a regular file or a folder, reached without following a
symbolic link membench did not make, never waited on (a FIFO would block its reader for ever),
and read within a bound (a record of deeply nested JSON is named as unreadable, never a
RecursionError). What breaks the rule is an UnusableFileError, one line naming the path and
what it is: the command line refuses it (exit 2) before any work.

Framework-free and free of the harness: workers, the command line and `analysis` use it.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, TextIO

# The most a JSON file membench reads may hold (records are about 10 KB, asv's result files
# and capacity results a few MB): a larger one is not membench's.
JSON_LIMIT_BYTES = 64 * 2**20


class UnusableFileError(OSError):
    """A path that is not a file (or folder) membench can use; the message says what it is."""

    def __init__(self, path: Path | str, what: str, rule: str = ""):
        self.path = Path(path)
        rule = rule or "membench reads and writes regular files only"
        super().__init__(f"{path} is {what}: {rule}")

    def __str__(self) -> str:  # OSError's own str would prefix an errno
        return str(self.args[0])


def kind(path: Path | str) -> str:
    """What is at path, in words, without following a link ("nothing" where nothing is)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "nothing"
    if stat.S_ISLNK(mode):
        return f"a symbolic link (to {os.readlink(path)})"
    for test, words in (
        (stat.S_ISREG, "a file"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
    ):  # fmt: skip
        if test(mode):
            return words
    return "not a file"


def open_regular(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A file descriptor of the regular file at path (created where flags say O_CREAT), its
    last component never a symbolic link, never blocking on a FIFO or device; the caller
    closes it. UnusableFileError for anything but a regular file; OSError as os.open's."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError:
        if file_problem(Path(path)):  # a link (ELOOP), a folder (EISDIR), a FIFO (ENXIO)...
            raise UnusableFileError(path, kind(path)) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnusableFileError(path, kind(path))
    os.set_blocking(fd, True)
    return fd


def open_for_writing(path: Path | str, append: bool = False) -> TextIO:
    """A text file membench writes (a worker's log), opened by the rule: created where it is
    missing, emptied unless append; UnusableFileError where a link, FIFO or folder is there."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    return os.fdopen(open_regular(path, flags), "a" if append else "w")


def read_bytes(path: Path | str, limit: int = JSON_LIMIT_BYTES) -> bytes:
    """The whole of a regular file of at most limit bytes (UnusableFileError, or ValueError
    where it is larger)."""
    with os.fdopen(open_regular(path), "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit / 2**20:.0f} MiB: not a file membench wrote")
    return data


def read_text(path: Path | str, limit: int = JSON_LIMIT_BYTES) -> str:
    return read_bytes(path, limit).decode()


def load_json(path: Path | str, limit: int = JSON_LIMIT_BYTES) -> Any:
    """A JSON file read by the rule, bounded: ValueError (UnicodeDecodeError and
    json.JSONDecodeError are ValueErrors) where it is too large, not text, not JSON, or nested
    deeper than the parser goes; UnusableFileError (an OSError) where it is no regular file."""
    return loads(read_bytes(path, limit))


# Deeper than anything membench writes (a record nests a few levels): refused before parsing,
# as the parser's own limit is the process's recursion limit, which frameworks raise
MAX_NESTING = 256
_STRUCTURE = re.compile(r'\\.|["\[\]{}]')  # an escape, a quote or a bracket


def nesting(text: str) -> int:
    """How deep a JSON text's arrays and objects nest (brackets inside strings not counted)."""
    depth = deepest = 0
    in_string = False
    for token in _STRUCTURE.finditer(text):
        c = token.group()
        if in_string:
            in_string = c != '"'
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def loads(text: str | bytes) -> Any:
    """json.loads, a nesting deeper than MAX_NESTING a ValueError, whatever the recursion
    limit (a RecursionError too, should the parser meet one first)."""
    if isinstance(text, bytes):
        text = text.decode()
    if text.count("[") + text.count("{") > MAX_NESTING and nesting(text) > MAX_NESTING:
        raise ValueError("JSON nested too deeply to read")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


def folder_problem(path: Path) -> str | None:
    """Why membench may not write into path as a folder (None: it may, or it does not exist
    yet): a symbolic link could lead anywhere, and a file or FIFO in its place is no folder."""
    if not os.path.lexists(path) or (path.is_dir() and not path.is_symlink()):
        return None
    return f"{path} is {kind(path)}, not a folder"


def file_problem(path: Path) -> str | None:
    """Why membench may not open path as its own regular file (None: it may, or it does not
    exist yet)."""
    if not os.path.lexists(path) or (path.is_file() and not path.is_symlink()):
        return None
    return f"{path} is {kind(path)}, not a file"
