"""One writer per record store: an advisory lock (flock) on <store>/.lock, held for a run.

A second run on the same store refuses at once, naming the holder's PID, or waits for it
(--wait). The lock's file descriptor is handed to the run's workers (pass_fds), so a worker
that outlived a killed runner still holds the store: a resumed run cannot measure a cell
that worker is still measuring. The kernel releases the lock when its last holder ends,
however it ends (kill -9 included); the file itself stays.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from membench import file_rules

LOCK_NAME = ".lock"

# File descriptors of the store locks this process holds: workers inherit them.
_held: list[int] = []


class StoreLockError(RuntimeError):
    """The store's lock cannot be taken; the message says why (one line for the user)."""


class StoreLockedError(StoreLockError):
    """Another process holds the store; the message names it."""


def held_fds() -> tuple[int, ...]:
    return tuple(_held)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder_text(path: Path) -> str:
    """Who holds the lock at path, as well as its file says."""
    try:
        pid = int(file_rules.read_text(path, 64).split()[0])
    except (OSError, ValueError, IndexError):
        return "another process"
    if _pid_alive(pid):
        return f"the run of PID {pid}"
    return (
        f"a process started by the run of PID {pid}, which has ended (a worker it left; "
        f"`fuser {path}` names it)"
    )


@contextmanager
def store_lock(
    root: Path, wait: bool = False, on_wait: Callable[[str], None] | None = None
) -> Iterator[Path]:
    """Hold the store's lock for the block. Raises StoreLockedError if another process
    holds it, or, with wait=True, blocks until it is free (on_wait(text) called first);
    StoreLockError where the lock file cannot be opened, or is no regular file (a folder, a
    FIFO, a symbolic link in its place: membench follows no link it did not make)."""
    path = root / LOCK_NAME
    if why := file_rules.file_problem(path):  # a link would have the PID written elsewhere
        raise StoreLockError(f"store {root}: its lock file {why}; remove it, then run again")
    root.mkdir(parents=True, exist_ok=True)
    try:
        fd = file_rules.open_regular(path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        raise StoreLockError(
            f"store {root}: its lock file {path} cannot be opened ({exc.strerror or exc}); "
            "remove it, then run again"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = holder_text(path)
            if not wait:
                raise StoreLockedError(
                    f"store {root} is in use by {holder}: wait for it, or give --wait"
                ) from None
            if on_wait:
                on_wait(f"store {root} is in use by {holder}; waiting")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _held.append(fd)
        try:
            yield path
        finally:
            _held.remove(fd)
    finally:
        os.close(fd)  # releases the lock (workers' inherited copies end with them)
