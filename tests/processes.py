"""Process helpers shared by the tests that kill runners and look for their workers."""

from pathlib import Path

import psutil


def workers_of(store: Path) -> list[psutil.Process]:
    """Live worker processes writing into a store."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "membench.measure.worker" in cmdline and str(store) in cmdline:
            found.append(proc)
    return found
