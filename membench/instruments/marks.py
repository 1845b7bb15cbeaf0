"""Phase marks: the worker tells the runner, by timestamps in a file, which part of the cell
it is in, so that the runner's memory timeline (membench.instruments.timeline) can be cut into
phases.

One line per mark, `<CLOCK_MONOTONIC seconds> <name>`, written with one os.write (no buffer to
lose if the worker dies). CLOCK_MONOTONIC is one clock for every process of the host, so the
runner's samples and the worker's marks share a time axis. Without open_marks (a worker run by
hand, a test) mark() does nothing. Framework-free: sessions mark their step's parts too.
"""

from __future__ import annotations

import os
import time

from membench import file_rules

# The cell's phases, in order; each starts at its mark and ends at the next. The runner marks
# "launch" when it starts the worker.
LAUNCH, IMPORT, BUILD, FIRST_STEP, WARM_UP, MEASURED, AFTER = (
    "launch", "import", "build", "first step", "warm-up", "measured steps", "after",
)  # fmt: skip
CELL_PHASES = (LAUNCH, IMPORT, BUILD, FIRST_STEP, WARM_UP, MEASURED, AFTER)
# Within a measured step: "step" marks each step's start; a session that can tell them apart
# without changing what it runs marks the parts of a training step.
STEP, FORWARD, BACKWARD, OPTIMIZER = "step", "forward", "backward", "optimizer"
STEP_PHASES = (FORWARD, BACKWARD, OPTIMIZER)
NAMES = (*CELL_PHASES, STEP, *STEP_PHASES)

_fd: int | None = None
lost = ""  # why marking stopped early (a full disk), else empty


def open_marks(path: str | os.PathLike) -> None:
    """Send this process's marks to path (appended)."""
    global _fd
    close_marks()
    _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def close_marks() -> None:
    global _fd
    if _fd is not None:
        os.close(_fd)
        _fd = None


def marking() -> bool:
    return _fd is not None


def mark(name: str) -> None:
    """Mark that phase `name` starts now (a no-op unless open_marks was called)."""
    if _fd is None:
        return
    if name not in NAMES:
        raise ValueError(f"unknown mark {name!r}; marks: {', '.join(NAMES)}")
    try:
        os.write(_fd, f"{time.monotonic():.6f} {name}\n".encode())
    except OSError as exc:  # marks are optional: a full disk must not end the measurement
        global lost
        lost = f"phase marks stopped at {name!r}: {type(exc).__name__}: {exc}"
        close_marks()


def read_marks(path: str | os.PathLike) -> list[tuple[float, str]]:
    """The marks in path, in order ([] where there is no file); a torn last line is dropped."""
    try:
        text = file_rules.read_text(path)
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        stamp, _, name = line.partition(" ")
        try:
            out.append((float(stamp), name))
        except ValueError:
            continue
    return [m for m in out if m[1] in NAMES]
