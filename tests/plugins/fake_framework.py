"""A framework for testing the harness itself, registered through MEMBENCH_PLUGINS.

Its step does what FAKE_BEHAVIOUR says (read in the worker process): allocate and touch
memory (a fixed block, or a block per sample), hang, raise, run out of memory, die by a
signal, grow without bound, count its measurements, wait holding Python's GIL (as a
framework that executes a step in native code without releasing it), or find the disk full
(simulated in its own process: FAKE_DISK_FULL says how full). No measurement the
suite publishes comes from it: it exists to prove the harness's handling.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import tempfile
import time
from pathlib import Path

from membench.backends import ANY, Backend, BuildSpec, Implemented, Readings, Session, Support
from membench.registry import (
    PRESETS,
    Framework,
    Workload,
    WorkloadSize,
    knob_defaults,
    register_framework,
    register_workload,
)

# Its one declaration, as a real framework's: tests/test_contracts.py follows each field to
# the place that reads it.
register_framework(
    Framework(
        "fake", "test double", "tests.plugins.fake_framework:FakeBackend", "membench",
        libraries=("psutil",), cpu_cell_seconds=3.0, gpu_cell_seconds=4.0,
        gpu_fix="the fake framework has no GPU build (a test double)",
    )
)  # fmt: skip
register_workload(Workload("fake-work", "harness test workload", {}))
for _preset in PRESETS.values():
    _preset.sizes.setdefault("fake-work", WorkloadSize((1, 2, 3)))

ALLOC_BYTES = 200 * 2**20
LIBC = ctypes.PyDLL(None)  # PyDLL keeps the GIL through a foreign call


class FakeSession(Session):
    def __init__(self, spec: BuildSpec):
        self.spec = spec
        self.behaviour = os.environ.get("FAKE_BEHAVIOUR", "alloc")
        self.steps = 0
        self.kept: list[bytearray] = []
        self.readings = FakeReadings(self)

    def step(self) -> None:
        self.steps += 1
        b = self.behaviour
        if b == "alloc":
            block = bytearray(ALLOC_BYTES)
            for i in range(0, ALLOC_BYTES, 4096):  # touch every page
                block[i] = 1
            del block
        elif b == "hang":
            time.sleep(3600)
        elif b == "raise":
            raise ValueError("boom from the step")
        elif b == "oom":
            raise MemoryError("fake allocator is out of memory")
        elif b == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        elif b == "per-sample":  # a known memory curve: FAKE_MIB_PER_SAMPLE x batch
            size = int(float(os.environ["FAKE_MIB_PER_SAMPLE"]) * 2**20) * self.spec.batch_size
            if self.steps == 1:  # a first step's extra (compilation): FAKE_FIRST_STEP_MIB
                size += int(float(os.environ.get("FAKE_FIRST_STEP_MIB", "0")) * 2**20)
            block = bytearray(size)
            for i in range(0, size, 4096):
                block[i] = 1
            del block
        elif b == "leak":  # keeps FAKE_MIB_PER_SAMPLE x batch more each step (a growing cell)
            size = int(float(os.environ["FAKE_MIB_PER_SAMPLE"]) * 2**20) * self.spec.batch_size
            block = bytearray(size)
            for i in range(0, size, 4096):
                block[i] = 1
            self.kept.append(block)
            time.sleep(float(os.environ.get("FAKE_STEP_SECONDS", "0")))
        elif b == "count":
            time.sleep(float(os.environ.get("FAKE_STEP_SECONDS", "0")))
        elif b == "hold-gil":
            LIBC.usleep(int(float(os.environ.get("FAKE_STEP_SECONDS", "0")) * 1e6))
        elif b == "disk-full":
            fill_disk(os.environ.get("FAKE_DISK_FULL", "new-files"))

    def notes(self) -> dict[str, object]:
        return {"behaviour": self.behaviour}


class FakeReadings(Readings):
    def trace_step(self, prefix: Path) -> dict[str, str]:
        """FAKE_TRACE: "write" a view's file, "crash" the view's worker; unset: no view."""
        view = os.environ.get("FAKE_TRACE", "")
        if view == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if view == "write":
            self.session.step()
            path = prefix.with_name(prefix.name + ".fake-view.txt")
            path.write_text(f"steps {self.session.steps}")
            return {"the fake view": path.name}
        return super().trace_step(prefix)


def _no_space(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fill_disk(how: str) -> None:
    """The disk fills, for the rest of this process (a simulation: nothing is written).
    "new-files": no file can be created or opened for writing; "writes": nor can a file be
    written to, but for the log (stderr); "everything": the log neither."""
    real_open = os.open

    def open_no_space(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            _no_space()
        return real_open(path, flags, *args, **kwargs)

    os.open, tempfile.mkstemp = open_no_space, _no_space
    if how in ("writes", "everything"):
        os.pwrite = _no_space
    if how == "everything":
        os.write = _no_space


class FakeBackend(Backend):
    name = "fake"
    baseline = "FAKE_BEHAVIOUR's step"
    builds_model_modules = False  # its step runs any workload without a model
    # Every knob's every value runs the same fake step (it measures the harness, not a knob).
    support: Support = {
        knob: {ANY: Implemented("FAKE_BEHAVIOUR's step")} for knob in knob_defaults()
    }

    def combination_refusal(self, spec: BuildSpec, device: str) -> str | None:
        s = spec.strategy
        if s.mode == "infer" and s.precision == "half":
            return "the fake framework has no half precision"
        return None

    def environment(self) -> dict[str, object]:
        return {"framework": "fake", "framework_version": "0", "device": "cpu"}

    def create_session(self, spec: BuildSpec) -> FakeSession:
        counter = os.environ.get("FAKE_COUNTER")
        if counter:  # one line per cell built: how a test sees what was (re-)measured
            with Path(counter).open("a") as f:
                f.write(f"{spec.strategy.name} {spec.batch_size}\n")
        return FakeSession(spec)
