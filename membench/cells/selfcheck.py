"""membench selfcheck: the suite's cells beside each framework's plain reference loop.

For each framework and strategy (ResNet-50 baseline, infer and accumulate-4 by default), the
suite's cell and the framework's reference loop (models/reference/) run one after the other,
each in a fresh process, with the same batch, image size, warm-up and measured step counts;
then the sampler thread's cost (membench/measure/probe_overhead.py). A throughput ratio suite /
reference outside 0.9-1.1 means the suite calls the framework differently from its users: our
bug until shown otherwise. Peaks: the suite's VmHWM over its measured steps (and its first
step) against the OS's maximum resident size of the reference process (wait4's ru_maxrss,
which includes import, build and compilation).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from membench import registry
from membench.cells.planning import declared_refusal
from membench.cells.termination import terminate_as_interrupt
from membench.cells.worker_launch import run_worker
from membench.environment import REPO_ROOT, detected_device
from membench.instruments.host_malloc import MMAP_THRESHOLD_ENV, mmap_threshold
from membench.instruments.probes import ForeignCpuProbe
from membench.interpreters import InterpreterError, framework_python
from membench.measure.distributed import kill_group
from membench.metrics import (
    BUSY_METRIC,
    FIRST_STEP_PEAK_HOST_RSS_BYTES,
    MIB,
    PEAK_HOST_RSS_BYTES,
    THROUGHPUT,
    TIMELINE_SAMPLER_CPU_SHARE,
)
from membench.records import Cell, Record, write_json_atomic

WORKLOAD = "resnet50"


def reference_loops() -> dict[str, str]:
    """Each framework's plain loop (its registration's reference_loop), where it has one."""
    return {f.name: f.reference_loop for f in registry.FRAMEWORKS.values() if f.reference_loop}


FAIR = (0.9, 1.1)  # the target band for suite / reference throughput


@dataclass
class ChildRun:
    """A finished child process: its last JSON line, its OS peak, or why it failed."""

    result: dict | None
    max_rss_bytes: int
    error: str = ""


@dataclass
class Row:
    framework: str
    strategy: str
    suite_samples_per_second: float | None = None
    reference_samples_per_second: float | None = None
    suite_peak_bytes: float | None = None  # VmHWM over the measured steps
    suite_first_step_peak_bytes: float | None = None
    reference_max_rss_bytes: float | None = None
    # the share of the host's CPU other processes used meanwhile: a ratio measured beside
    # other work says little (ForeignCpuProbe)
    suite_foreign_cpu: float | None = None
    reference_foreign_cpu: float | None = None
    note: str = ""

    @property
    def throughput_ratio(self) -> float | None:
        s, r = self.suite_samples_per_second, self.reference_samples_per_second
        return s / r if s and r else None

    @property
    def peak_ratio(self) -> float | None:
        s, r = self.suite_peak_bytes, self.reference_max_rss_bytes
        return s / r if s and r else None


# GNU time: the reference process's own peak (see run_child)
TIME = "/usr/bin/time"


def child_env(framework: str, strategy: str) -> dict[str, str]:
    """The environment the suite's worker would set for this cell, on ours, with this checkout
    importable (for a reference loop, which has no worker to set it)."""
    backend = registry.load_backend(framework)
    knobs = registry.strategy(strategy)
    env = dict(os.environ)
    env.update(backend.env_vars(knobs, detected_device()))
    if (threshold := mmap_threshold(knobs.allocator)) is not None:
        env[MMAP_THRESHOLD_ENV] = str(threshold)  # the worker's mallopt, read at the start
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def run_child(cmd: Sequence[str], env: dict[str, str], timeout: float, logs: Path) -> ChildRun:
    """Run cmd to its end (killed past timeout) and read its own maximum resident size.

    GNU time forks and execs it and reports that process's ru_maxrss alone. Read directly by
    wait4, a child forked from this (large) process would count our resident memory too: the
    kernel keeps the high-water mark of the address space the child replaced at exec."""
    logs.mkdir(parents=True, exist_ok=True)
    out, err, peak = logs / "stdout", logs / "stderr", logs / "maxrss_kib"
    if not Path(TIME).is_file():
        raise FileNotFoundError(f"{TIME} (Debian's 'time') is missing: scripts/install.sh adds it")
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(
            [TIME, "-f", "%M", "-o", str(peak), *cmd],
            stdout=stdout, stderr=stderr, env=env, cwd=REPO_ROOT, start_new_session=True,
        )  # fmt: skip
        timer = threading.Timer(timeout, kill_group, (proc.pid,))
        timer.start()
        try:  # SIGTERM too (`timeout`, a scheduler) kills the child's group, as Ctrl-C does
            with terminate_as_interrupt():
                _, status, _ = os.wait4(proc.pid, 0)
        except BaseException:
            kill_group(proc.pid)
            raise
        finally:
            timer.cancel()
    proc.returncode = rc = os.waitstatus_to_exitcode(status)
    reported = [ln for ln in peak.read_text().splitlines() if ln.strip().isdigit()]
    max_rss = int(reported[-1]) * 1024 if reported else 0  # KiB; none where time was killed
    lines = [line for line in out.read_text().splitlines() if line.startswith("{")]
    if rc == 0 and lines:
        return ChildRun(json.loads(lines[-1]), max_rss)
    tail = err.read_text(errors="replace")[-600:].strip()
    try:  # a loop that refuses what it has no plain way to run says why in its JSON line
        tail = json.loads(lines[-1])["error"] if lines else tail
    except (ValueError, KeyError, TypeError):
        pass
    why = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
    return ChildRun(None, max_rss, f"{why}: {tail}")


def reference_command(framework: str, strategy: str, cell: Cell) -> list[str]:
    """The reference loop's command line for the cell's model, batch and counts."""
    s = registry.strategy(strategy)
    preset = registry.preset(cell.preset)
    return [
        framework_python(framework), "-m", reference_loops()[framework],
        "--module", registry.workload(cell.workload).model_modules[framework],
        "--inputs", json.dumps(preset.size(cell.workload).inputs),
        "--batch", str(cell.batch_size), "--mode", s.mode, "--accumulate", str(s.accumulate),
        "--warmup", str(preset.warmup_min_steps), "--steps", str(preset.measure_steps),
        "--precision", s.precision, "--memory-format", s.memory_format,
    ]  # fmt: skip


def compare(framework: str, strategy: str, batch: int, logs: Path) -> Row:
    """The suite's cell, then the reference loop, for one framework and strategy."""
    row = Row(framework, strategy)
    cell = Cell(WORKLOAD, framework, strategy, batch, "selfcheck")
    if reason := declared_refusal(cell):
        row.note = f"unsupported: {reason}"
        return row
    timeout = registry.preset("selfcheck").cell_timeout(WORKLOAD)
    record: Record = run_worker(cell, logs / f"{cell.key}.log", timeout)
    write_json_atomic(logs / f"{cell.key}.record.json", record.to_dict())
    if record.status == "ok":
        m = record.metrics
        row.suite_samples_per_second = m[THROUGHPUT]
        row.suite_peak_bytes = m[PEAK_HOST_RSS_BYTES]
        row.suite_first_step_peak_bytes = m[FIRST_STEP_PEAK_HOST_RSS_BYTES]
        row.suite_foreign_cpu = m.get(BUSY_METRIC)
    else:
        row.note = f"suite {record.status}: {record.reason[:200]}"
    cmd = reference_command(framework, strategy, cell)
    foreign = ForeignCpuProbe()  # over the reference's whole run: its children's CPU is ours
    ref = run_child(cmd, child_env(framework, strategy), timeout, logs / f"{cell.key}.reference")
    row.reference_foreign_cpu = foreign.read()
    row.reference_max_rss_bytes = float(ref.max_rss_bytes) if ref.result else None
    if ref.result:
        row.reference_samples_per_second = ref.result["samples_per_second"]
    else:
        row.note = (row.note + "; " if row.note else "") + f"reference {ref.error[:200]}"
    return row


def probe_overhead(framework: str, batch: int, logs: Path) -> dict:
    """The sampler thread's cost on the framework's baseline step (a process of its own)."""
    cell = Cell(WORKLOAD, framework, "baseline", batch, "selfcheck")
    cmd = [
        framework_python(framework),
        "-m",
        "membench.measure.probe_overhead",
        "--cell",
        cell.to_json(),
    ]
    env = child_env(framework, "baseline")
    run = run_child(cmd, env, registry.preset("selfcheck").cell_timeout(WORKLOAD), logs / "probe")
    return run.result or {"error": run.error}


def selfcheck(
    frameworks: Sequence[str],
    strategies: Sequence[str] = registry.SELFCHECK_STRATEGIES,
    image_size: int = 64,
    batch: int = 4,
    on_row: Callable[[Row], None] | None = None,
    logs: Path | None = None,
) -> tuple[list[Row], dict[str, dict]]:
    """Every framework x strategy compared, interleaved (suite, reference, next ...), then
    each framework's probe overhead. Workers read the image size from the environment."""
    os.environ[registry.SELFCHECK_IMAGE_SIZE_ENV] = str(image_size)  # preset("selfcheck")
    logs = logs or Path(tempfile.mkdtemp(prefix="membench-selfcheck-"))
    rows, overhead = [], {}
    for framework in frameworks:
        for strategy in strategies:
            try:
                row = compare(framework, strategy, batch, logs / framework)
            except InterpreterError as exc:
                row = Row(framework, strategy, note=str(exc))
            rows.append(row)
            if on_row:
                on_row(row)
    for framework in frameworks:
        try:
            overhead[framework] = probe_overhead(framework, batch, logs / framework)
        except InterpreterError as exc:
            overhead[framework] = {"error": str(exc)}
    return rows, overhead


def _num(value: float | None, fmt: str, scale: float = 1.0) -> str:
    return "-" if value is None else fmt.format(value / scale)


HEADER = (
    f"{'framework':<9} {'strategy':<13} {'suite sps':>9} {'ref sps':>8} {'ratio':>6}  "
    f"{'suite peak':>10} {'suite 1st':>9} {'ref maxrss':>10} {'peak/max':>8} {'foreign s/r':>11}"
)


def format_row(row: Row) -> str:
    """One line of the table: throughput in samples/s, memory in MiB; '!' marks a ratio
    outside the fair band."""
    ratio = row.throughput_ratio
    foreign = f"{_num(row.suite_foreign_cpu, '{:.0%}')}/{_num(row.reference_foreign_cpu, '{:.0%}')}"
    flag = "" if ratio is None or FAIR[0] <= ratio <= FAIR[1] else "!"
    line = (
        f"{row.framework:<9} {row.strategy:<13} "
        f"{_num(row.suite_samples_per_second, '{:.2f}'):>9} "
        f"{_num(row.reference_samples_per_second, '{:.2f}'):>8} "
        f"{_num(ratio, '{:.2f}') + flag:>6}  "
        f"{_num(row.suite_peak_bytes, '{:.0f}', MIB):>10} "
        f"{_num(row.suite_first_step_peak_bytes, '{:.0f}', MIB):>9} "
        f"{_num(row.reference_max_rss_bytes, '{:.0f}', MIB):>10} "
        f"{_num(row.peak_ratio, '{:.2f}'):>8} "
        f"{foreign:>11}"
    )
    return f"{line}  {row.note}" if row.note else line


def format_overhead(framework: str, result: dict) -> str:
    """One framework's probe cost as a line: both medians, the rounds' range, the coverage."""
    if "error" in result:
        return f"{framework:<9} probe overhead: failed: {result['error'][:300]}"
    return (
        f"{framework:<9} sampler thread ({result['reader']}): step "
        f"{result['step_seconds_without']:.4f} s without, {result['step_seconds_with']:.4f} s "
        f"with: {result['overhead']:+.2%} (rounds {result['overhead_rounds_min']:+.2%} to "
        f"{result['overhead_rounds_max']:+.2%}; {result['samples']} readings, "
        f"{result['sampler_coverage']:.0%} of the interval's)" + _timeline_line(framework, result)
    )


def _timeline_line(framework: str, result: dict) -> str:
    """The timeline sampler's cost, where measured (a line of its own)."""
    if "timeline_overhead" not in result:
        return ""
    share = result.get(TIMELINE_SAMPLER_CPU_SHARE)
    cpu = f"; the sampler used {share:.1%} of a core" if share is not None else ""
    return (
        f"\n{framework:<9} timeline sampler (runner, every "
        f"{result['timeline_interval_seconds'] * 1000:.0f} ms): step "
        f"{result['timeline_step_seconds_with']:.4f} s with: {result['timeline_overhead']:+.2%} "
        f"(rounds {result['timeline_overhead_rounds_min']:+.2%} to "
        f"{result['timeline_overhead_rounds_max']:+.2%}{cpu})"
    )


def as_json(
    rows: list[Row], overhead: dict[str, dict], image_size: int, batch: int,
    provenance: dict | None = None,
) -> dict:  # fmt: skip
    """What a selfcheck found, for a file beside the records (with the machine and commit
    that measured it, where given)."""
    return {
        **(provenance or {}),
        "workload": WORKLOAD,
        "image_size": image_size,
        "batch": batch,
        "host_cpu_count": os.cpu_count(),
        "rows": [
            {**asdict(r), "throughput_ratio": r.throughput_ratio, "peak_ratio": r.peak_ratio}
            for r in rows
        ],
        "probe_overhead": overhead,
    }
