"""The suite's absolute peak host RSS against the operating system's own figure."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from membench.cells import supervision
from membench.records import Cell
from membench.registry import preset

from .conftest import REPO

TIME = Path("/usr/bin/time")

SAME_WORK_ALONE = """
from membench.backends import BuildSpec
from membench.backends.torch_backend import TorchBackend
from membench.registry import preset, strategy
size = preset("cpu").size("resnet50")
session = TorchBackend().build(BuildSpec("resnet50", strategy("baseline"), size, {batch}))
for _ in range({steps}):
    session.step()
"""


def test_suite_peak_agrees_with_time_v_within_10_percent(store):
    pytest.importorskip("torch")
    assert TIME.exists(), "/usr/bin/time is installed by scripts/install.sh (Debian's 'time')"
    cell = Cell("resnet50", "torch", "baseline", 2, "cpu")
    record = supervision.run([cell], store).records[0]
    assert record.status == "ok", record.reason
    suite_peak = record.metrics["peak_host_rss_bytes"]

    # The same work run alone: the same build and as many steps, no probe, no reset.
    steps = 1 + int(record.metrics["warmup_steps"]) + preset("cpu").measure_steps
    script = SAME_WORK_ALONE.format(batch=cell.batch_size, steps=steps)
    out = subprocess.run(
        [str(TIME), "-v", sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr).group(1))
    os_peak = kib * 1024
    assert abs(suite_peak - os_peak) / os_peak <= 0.10, (suite_peak, os_peak)
