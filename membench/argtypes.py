"""Command-line value parsers, every one of membench's commands and its module entry points
(which run under a framework's own interpreter: membench modules are imported inside the
parsers that need them, never at import time).
Every number is read by one function, _number or _ascii_int, wherever it comes from (an
option, a MEMBENCH_ variable: membench.settings): ASCII only (int() and float() also read
full-width digits and underscores), then finite and within its bounds."""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

# The largest batch any command accepts (capacity's doubling stops there too).
MAX_BATCH = 65_536
# The longest time any command accepts (a cell's --timeout, plan's --seconds): a week. More
# is no limit at all, and past 2**31 s the worker's alarm(2) overflows.
MAX_SECONDS = 7 * 24 * 3600
# Linux's limits (NAME_MAX, PATH_MAX less its NUL): a longer path fails in the kernel, as
# "File name too long", wherever a command first uses it.
NAME_MAX_BYTES = 255
PATH_MAX_BYTES = 4095


# The shortest --timeout of a cell: no worker starts its interpreter and imports a framework
# in less (the fake test framework's worker takes 0.3 s), so a shorter one measures nothing and
# records every cell `timeout`.
SHORTEST_CELL_SECONDS = 1.0


def _ascii_int(text: str) -> int | None:
    """The whole number a text spells in ASCII digits; None where it spells none."""
    raw = text.strip()
    return int(raw) if raw.isascii() and raw.isdigit() else None


def _number(text: str) -> float | None:
    """The number a text spells in ASCII (1.5, 2e3, inf); None where it spells none. It may be
    infinite or NaN: each parser judges its own bounds."""
    raw = text.strip()
    if not raw.isascii() or "_" in raw:
        return None
    try:
        return float(raw)
    except ValueError:
        return None


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
    """Seconds in (0, MAX_SECONDS]: NaN, infinity and 1e308 refused."""
    value = _number(text) or 0.0
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_SECONDS} seconds (a week), got {text!r}"
        )
    return value


def cell_timeout(text: str) -> float:
    """A cell's --timeout: positive_seconds, at least SHORTEST_CELL_SECONDS."""
    value = positive_seconds(text)
    if value < SHORTEST_CELL_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be at least {SHORTEST_CELL_SECONDS:g} s (a worker takes about that to start: "
            f"every cell would end `timeout`), got {text!r}"
        )
    return value


def names(text: str) -> list[str]:
    """Comma-separated names, at least one (an empty one is never "all"), each once in the
    order given (`-s baseline,baseline` is one strategy)."""
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
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
    values = [_ascii_int(p.removeprefix("-")) for p in parts]
    if any(v is None for v in values):
        raise argparse.ArgumentTypeError(f"batch sizes must be integers, got {text!r}")
    values = [-v if p.startswith("-") else v for p, v in zip(parts, values, strict=True)]
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"batch sizes must be positive integers, got {text!r}")
    if any(v > MAX_BATCH for v in values):
        raise argparse.ArgumentTypeError(f"batch sizes must be at most {MAX_BATCH}, got {text!r}")
    return list(dict.fromkeys(values))  # each once, in the order given


def metric_names(text: str) -> list[str]:
    """Comma-separated metric names from the catalogue."""
    from membench.metrics import METRICS
    from membench.unknown_names import UnknownNameError

    found = names(text)
    for metric in found:
        if metric not in METRICS:
            unknown = UnknownNameError("metric", metric, list(METRICS))
            raise argparse.ArgumentTypeError(f"{unknown} (the catalogue: membench/metrics.py)")
    return found


def fraction(low_inclusive: bool) -> Callable[[str], float]:
    """A fraction below 1: in [0, 1) (0 meaning exact) or in (0, 1)."""

    def parse(text: str) -> float:
        value = _number(text)
        value = -1.0 if value is None else value
        if not (0 <= value < 1 if low_inclusive else 0 < value < 1):
            bounds = "[0, 1)" if low_inclusive else "(0, 1)"
            raise argparse.ArgumentTypeError(f"must be a fraction in {bounds}, got {text!r}")
        return value

    return parse


def checked_path(text: str) -> Path:
    """A path the kernel can take: no component over NAME_MAX bytes, the whole within
    PATH_MAX, no NUL (checked here, so that no command meets ENAMETOOLONG half-way)."""
    if not text:
        raise argparse.ArgumentTypeError("give a path, got ''")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"a path cannot hold a NUL character, got {text!r}")
    raw = os.fsencode(text)
    if len(raw) > PATH_MAX_BYTES:
        raise argparse.ArgumentTypeError(
            f"path too long: {len(raw)} bytes, at most {PATH_MAX_BYTES} ({text[:40]!r}...)"
        )
    if long := [c for c in raw.split(b"/") if len(c) > NAME_MAX_BYTES]:
        raise argparse.ArgumentTypeError(
            f"path component too long: {len(long[0])} bytes, at most {NAME_MAX_BYTES} "
            f"({os.fsdecode(long[0])[:40]!r}...)"
        )
    return Path(text)


def _is_dir(path: Path, text: str) -> bool:
    try:
        return path.is_dir()
    except OSError as exc:  # e.g. a folder on the way that cannot be searched
        raise argparse.ArgumentTypeError(f"cannot read {text!r}: {exc.strerror}") from None


def results_dir(text: str) -> Path:
    path = checked_path(text)
    if not _is_dir(path, text):
        raise argparse.ArgumentTypeError(f"no results folder at {text!r}")
    return path


def store_dir(text: str) -> Path:
    path = checked_path(text)
    if not _is_dir(path, text):
        raise argparse.ArgumentTypeError(f"no store folder at {text!r}")
    return path


def writable_file(text: str) -> Path:
    """A file path whose folder is (or can be made) writable: checked, nothing written."""
    path = checked_path(text)
    if _is_dir(path, text):
        raise argparse.ArgumentTypeError(f"cannot write to {text!r}: it is a folder")
    writable_dir(str(path.parent))
    return path


def writable_dir(text: str) -> Path:
    """A folder that exists and is writable, or can be created: checked, not created."""
    path = checked_path(text)
    probe = path
    try:  # a real attempt: permission bits do not tell for root or special file systems
        while not probe.exists():
            probe = probe.parent
        if not probe.is_dir():
            raise argparse.ArgumentTypeError(f"cannot write to {text!r}: {probe} is not a folder")
        os.rmdir(tempfile.mkdtemp(dir=probe, prefix=".membench-check-"))
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"cannot write to {text!r}: no file can be made in {probe} ({exc.strerror})"
        ) from None
    return path


# The smallest size a budget or memory cap may be: no cell fits below it (the smallest peak of
# any committed cell is 91 MiB, Jittor's tiny Transformer in smoke), so a smaller one is a unit
# left out (`--budget 2` is 2 bytes), which would record a search of nothing, or `oom` cells.
SMALLEST_SIZE = 64 * 2**20


def byte_size(text: str) -> float:
    """2GiB, 1500MiB, 3.5GB, 1TiB or a plain number of bytes, at least SMALLEST_SIZE."""
    units = {
        "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
        "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "b": 1,
    }  # fmt: skip
    raw = text.strip().lower()
    for unit, factor in units.items():
        if raw.endswith(unit):
            raw, scale = raw[: -len(unit)], factor
            break
    else:
        scale = 1
    number = _number(raw)
    if number is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 2GiB, 1500MiB, 1TiB)")
    value = number * scale
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"a size must be finite, got {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive, got {text!r}")
    if value < SMALLEST_SIZE:
        unit = "" if raw != text.strip().lower() else " (a number without a unit is bytes)"
        raise argparse.ArgumentTypeError(
            f"{text!r} is under {SMALLEST_SIZE // 2**20} MiB{unit}, less than any cell needs: "
            "give a size such as 2GiB or 1500MiB"
        )
    return value


def memory_cap_bytes(text: str) -> float:
    """--memory-cap: a size (e.g. 8GiB) above zero and within the host's memory."""
    from membench.instruments.memory_cap import total_bytes

    value = byte_size(text)  # positive and finite
    if value > (total := total_bytes()):
        raise argparse.ArgumentTypeError(
            f"{text!r} is more than this host's {total / 2**30:.1f} GiB: it would cap nothing"
        )
    return value


# A machine's name, wherever it comes from (MEMBENCH_MACHINE, pack --machine, an archive's
# manifest, the host's own kind): a folder's name under results/ and a page's under
# docs/results/, so lower-case letters and digits in words joined by single hyphens, as
# membench.environment.machine_for makes them (amd-epyc-f26m2-avx512bf16-2core-24gib).
MACHINE_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*", re.ASCII)
MACHINE_NAME_MAX = 100


def machine(text: str) -> str:
    if MACHINE_NAME.fullmatch(text) and len(text) <= MACHINE_NAME_MAX:
        return text
    words = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    hint = f" (e.g. {words[:MACHINE_NAME_MAX]!r})" if words else ""
    raise argparse.ArgumentTypeError(
        f"not a machine name: {text!r}; a machine is named by lower-case letters and digits "
        f"in words joined by single hyphens, at most {MACHINE_NAME_MAX} characters{hint}"
    )


def ray_address(text: str) -> str:
    """A Ray cluster to join: auto (the one this machine belongs to) or HOST:PORT of its head."""
    raw = text.strip()
    host, _, port = raw.rpartition(":")
    number = _ascii_int(port)
    usable = host and number and number < 65536 and host.isprintable() and " " not in host
    if raw != "auto" and not usable:
        raise argparse.ArgumentTypeError(
            f"give auto or HOST:PORT of the cluster's head (port 1-65535), got {text!r}"
        )
    return raw


def switch(text: str) -> bool:
    """On or off: 1, true, yes / 0, false, no (any case)."""
    raw = text.strip().lower()
    if raw in ("1", "true", "yes"):
        return True
    if raw in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"must be 1 or 0 (true/false, yes/no), got {text!r}")


_MODULE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", re.ASCII)


def module_names(text: str) -> list[str]:
    """Comma-separated importable module names (a.b.c)."""
    found = names(text)
    if bad := [m for m in found if not _MODULE.fullmatch(m)]:
        raise argparse.ArgumentTypeError(f"not a module name: {bad[0]!r}")
    return found


def revision(text: str) -> str:
    """A git commit or ref (checked by git where it is used): one word, not an option."""
    raw = text.strip()
    if not raw or raw.startswith("-") or not raw.isprintable() or any(c.isspace() for c in raw):
        raise argparse.ArgumentTypeError(f"not a git commit: {text!r}")
    return raw


def python_interpreter(text: str) -> Path:
    """An interpreter that runs Python 3 (relative paths: from the checkout): run once to
    know, so that a wrong one (a path to nothing, /bin/false) is refused before any worker."""
    from membench.paths import REPO_ROOT

    path = checked_path(text.strip()).expanduser()
    path = path if path.is_absolute() else REPO_ROOT / path
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise argparse.ArgumentTypeError(f"no executable Python at {str(path)!r}")
    if why := _not_python3(str(path)):
        raise argparse.ArgumentTypeError(f"{str(path)!r} {why}")
    return path


@functools.cache  # once a process: the runner asks at each cell's launch
def _not_python3(path: str) -> str | None:
    """Why the program at path is no Python 3 interpreter (None: it is one)."""
    probe = "import sys; print(sys.version_info[0])"
    try:
        done = subprocess.run([path, "-I", "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"does not run: {exc}"
    if done.returncode != 0 or done.stdout.strip() != "3":
        return f"is not a Python 3 interpreter (it exited {done.returncode})"
    return None
