"""SIGTERM and SIGHUP handled as Ctrl-C while cells run, and which signal ended a run."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a scheduler, `timeout`, a closed terminal), handled as Ctrl-C."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"terminated by {signal.Signals(signum).name}")


# The signal that ended the run, whatever exception carried it up (a library may re-raise a
# plain KeyboardInterrupt): the command line's exit status says which it was.
received: list[int] = []


def _raise_terminated(signum: int, frame: object) -> None:
    received.append(signum)
    raise Terminated(signum)


def raise_if_terminated(since: int) -> None:
    """Raise Terminated for a signal received after the first `since`, whose exception code
    running at that moment swallowed: a finaliser's (Ray's ObjectRefGenerator.__del__, where
    Python only prints "Exception ignored"), so a loop that polls calls this between waits."""
    if len(received) > since:
        raise Terminated(received[-1])


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP end the run as Ctrl-C does: the running worker's
    process group is killed and the finished records stay (signals reach the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
