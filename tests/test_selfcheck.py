"""membench selfcheck: each child's own OS peak, the reference loops' command lines, the
fairness flag, and the probe-overhead measurement (on the fake framework)."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from membench import registry
from membench.cells import selfcheck
from membench.cli import main
from membench.records import Cell

from .conftest import REPO

MIB = 2**20


def _allocating(mib: int) -> list[str]:
    code = (
        f"b = bytearray({mib} * 2**20)\n"
        "for i in range(0, len(b), 4096): b[i] = 1\n"
        "import json; print('log line'); print(json.dumps({'samples_per_second': 2.5}))\n"
    )
    return [sys.executable, "-c", code]


def test_run_child_reads_each_child_s_own_peak(tmp_path):
    big = selfcheck.run_child(_allocating(300), {}, 60, tmp_path / "big")
    small = selfcheck.run_child(_allocating(20), {}, 60, tmp_path / "small")
    assert big.result == small.result == {"samples_per_second": 2.5}
    assert big.max_rss_bytes >= 300 * MIB
    # the second child's own peak, not the largest of all children (RUSAGE_CHILDREN)
    assert small.max_rss_bytes < 150 * MIB


def test_run_child_says_why_a_child_failed(tmp_path):
    cmd = [sys.executable, "-c", "import sys; print('nope', file=sys.stderr); sys.exit(3)"]
    failed = selfcheck.run_child(cmd, {}, 60, tmp_path / "f")
    assert failed.result is None and failed.error == "exit status 3: nope"
    hung = selfcheck.run_child(
        [sys.executable, "-c", "import time; time.sleep(60)"], {}, 1, tmp_path
    )
    assert hung.result is None and hung.error.startswith("killed by SIGKILL")


def test_a_terminated_selfcheck_leaves_no_child_behind(tmp_path):
    """`timeout` ends a selfcheck with SIGTERM: the reference loop or probe it waits for (in a
    session of its own, under GNU time) is killed with it, not left running."""
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    parent = (
        "import sys; from pathlib import Path; from membench.cells import selfcheck; "
        f"selfcheck.run_child([sys.executable, '-c', {child!r}], {{}}, 60, Path({str(tmp_path)!r}))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", parent], env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and proc.poll() is None, "the child never started"
        time.sleep(0.1)
    grandchild = psutil.Process(int(pid_file.read_text()))
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) != 0
        assert _ends(grandchild, within=10), "the reference loop outlived its selfcheck"
    finally:  # a failure here leaves nothing behind either
        with contextlib.suppress(psutil.NoSuchProcess):
            grandchild.kill()


def _ends(proc: psutil.Process, within: float) -> bool:
    """Whether proc is gone (or a zombie nobody reaped yet) within so many seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def test_the_reference_loop_runs_the_cell_s_model_batch_and_counts():
    cell = Cell("resnet50", "jax", "accumulate-4", 8, "selfcheck")
    cmd = selfcheck.reference_command("jax", "accumulate-4", cell)
    args = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    preset = registry.preset("selfcheck")
    assert cmd[1:3] == ["-m", "models.reference.flax_loop"]
    assert args["--module"] == "models.resnet50.flax_impl"
    assert json.loads(args["--inputs"]) == preset.size("resnet50").inputs
    assert (args["--batch"], args["--mode"], args["--accumulate"]) == ("8", "train", "4")
    assert (int(args["--warmup"]), int(args["--steps"])) == (
        preset.warmup_min_steps,
        preset.measure_steps,
    )


def test_the_reference_loop_runs_the_strategy_s_precision_and_layout():
    cell = Cell("resnet50", "torch", "amp-bf16-channels-last", 4, "selfcheck")
    cmd = selfcheck.reference_command("torch", "amp-bf16-channels-last", cell)
    args = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert (args["--precision"], args["--memory-format"]) == ("amp-bf16", "channels-last")


@pytest.mark.slow
@pytest.mark.parametrize(
    "loop, precision, layout, refusal",
    [
        ("torch_loop", "amp-bf16", "channels-last", None),
        ("torch_loop", "amp-fp16", "contiguous", "PyTorch's plain loop runs fp32, amp-bf16"),
        ("flax_loop", "fp32", "channels-last", "Flax's plain loop lays images out one way"),
    ],
)
def test_a_plain_loop_runs_what_its_framework_does_plainly_and_says_why_not_the_rest(
    loop, precision, layout, refusal
):
    """torch's loop trains in bfloat16 autocast on a channels-last model and batch (its step
    times printed); a precision or layout a loop has no plain way to run ends it with exit 2
    and the reason as its one JSON line, before anything is built."""
    module = "models.resnet50." + ("torch_impl" if loop == "torch_loop" else "flax_impl")
    inputs = json.dumps({"image_size": 32, "num_classes": 10})
    done = subprocess.run(
        [sys.executable, "-m", f"models.reference.{loop}", "--module", module, "--inputs",
         inputs, "--batch", "2", "--warmup", "1", "--steps", "1", "--precision", precision,
         "--memory-format", layout],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if refusal is None:
        assert done.returncode == 0 and answer["samples_per_second"] > 0, done.stderr[-500:]
    else:
        assert done.returncode == 2 and answer["error"].startswith(refusal)


def test_workers_take_the_selfcheck_image_size_from_the_environment():
    code = (
        "from membench import registry; print(registry.preset('selfcheck').size('resnet50').inputs)"
    )
    env = {"MEMBENCH_SELFCHECK_IMAGE_SIZE": "224", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "{'image_size': 224, 'num_classes': 1000}"


def test_a_ratio_outside_the_fair_band_is_marked():
    slow = selfcheck.Row("jax", "accumulate-4", 0.16, 2.25, 900 * MIB, 950 * MIB, 1600 * MIB)
    fair = selfcheck.Row("torch", "baseline", 8.0, 8.2, 1500 * MIB, 1500 * MIB, 1700 * MIB)
    assert "0.07!" in selfcheck.format_row(slow)
    assert "0.98 " in selfcheck.format_row(fair) and "!" not in selfcheck.format_row(fair)
    assert fair.peak_ratio == pytest.approx(1500 / 1700)
    assert selfcheck.format_row(
        selfcheck.Row("jittor", "checkpoint", note="unsupported: x")
    ).endswith("unsupported: x")


def test_a_framework_without_a_reference_loop_is_refused(fake_framework, capsys):
    assert main(["selfcheck", "-f", "fake"]) == 2
    assert "fake has no reference loop" in capsys.readouterr().err


def test_the_probe_overhead_times_steps_with_and_without_the_sampler(fake_framework, monkeypatch):
    from membench.measure.probe_overhead import measure

    monkeypatch.setenv("FAKE_BEHAVIOUR", "count")
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.1")
    result = measure(Cell("fake-work", "fake", "baseline", 1, "smoke"), rounds=2, steps=3)
    assert result["reader"].startswith("VmRSS")
    assert result["step_seconds_without"] >= 0.1 and result["step_seconds_with"] >= 0.1
    assert result["overhead"] == pytest.approx(
        result["step_seconds_with"] / result["step_seconds_without"] - 1
    )
    assert result["samples"] >= 4  # the sampler ran: a first and a last reading per round
    assert result["rounds"] == 2
    # a sleeping step costs the same with a reader beside it: every round within 50%
    assert -0.5 < result["overhead_rounds_min"] <= result["overhead_rounds_max"] < 0.5
    # the fake step sleeps (the GIL is free): the thread reads at nearly every one of the 32
    # readings asked for (one as it starts, then one per 20 ms of 0.6 s); the two of each
    # round's start and stop are not counted
    assert 0.7 < result["sampler_coverage"] <= 1.05
    # the runner's timeline sampler, a process of its own, timed in interleaved rounds too
    assert result["timeline_step_seconds_with"] >= 0.1
    assert result["timeline_overhead"] == pytest.approx(
        result["timeline_step_seconds_with"] / result["step_seconds_without"] - 1
    )
    assert -0.5 < result["timeline_overhead_rounds_min"] <= result["timeline_overhead_rounds_max"]
    assert 0 < result["timeline_sampler_cpu_share"] < 0.5
    assert result["timeline_interval_seconds"] == 0.005


def test_the_probe_overhead_shows_a_step_that_holds_the_gil_starving_the_sampler(
    fake_framework, monkeypatch
):
    from membench.measure.probe_overhead import measure

    monkeypatch.setenv("FAKE_BEHAVIOUR", "hold-gil")
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.2")
    result = measure(Cell("fake-work", "fake", "baseline", 1, "smoke"), rounds=2, steps=3)
    assert result["step_seconds_with"] >= 0.2
    # 62 readings asked for (a first per round, then one per 20 ms of 1.2 s); the thread gets
    # the GIL between steps only
    assert result["sampler_coverage"] < 0.3


def test_a_loops_refusal_reaches_the_row_with_its_reason(tmp_path):
    """A plain loop that refuses (exit 2, its reason as a JSON line) is not just an exit
    status on the row: the reason is there."""
    import sys

    code = 'import json, sys; print(json.dumps({"error": "no plain way"})); sys.exit(2)'
    run = selfcheck.run_child([sys.executable, "-c", code], dict(os.environ), 60, tmp_path)
    assert run.result is None and run.error == "exit status 2: no plain way"
