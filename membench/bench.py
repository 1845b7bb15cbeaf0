"""The main job: measure the preset's cells (with progress), record them with asv, summarise."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from membench import paths, runner
from membench.asv_suite import allow_busy as allow_busy_record
from membench.engines import Engine, LocalEngine, node_label
from membench.environment import (
    REPO_ROOT,
    asv_machine_fields,
    git_commit,
    host_environment,
    machine_name,
)
from membench.estimate import Forecast, forecast, minutes
from membench.metrics import BUSY_SHARE, busy_share, kept_out_as_busy
from membench.records import Cell, Record, RecordStore

console = Console(stderr=True)


def run_with_progress(
    cells: Sequence[Cell],
    store: RecordStore,
    control: runner.RunControl = runner.DEFAULT_CONTROL,
    engine: Engine | None = None,
    busy_rule: bool = False,
    allow_busy: bool = False,
) -> runner.RunResult:
    """The engine's run (default: local) with its time estimate first, then a progress bar
    with the remaining estimate (corrected as cells finish) and one line per finished cell;
    engines that measure several cells at once show them and their nodes, and a cell they
    resubmit (its node lost) as they resubmit it. A cell measured on a busy host
    (metrics.BUSY_SHARE) is flagged as it finishes; with busy_rule (membench bench) it is
    measured once more at the end, and one still busy then is marked and kept where
    allow_busy, else left out of asv and the tables' speed figures (its record keeps the
    share). The progress display sets control's callbacks."""
    second_try = False
    engine = engine or LocalEngine()
    plan = forecast(
        cells, store, machine_name(), control.fresh, control.retry_failed, control.timeout
    )
    print_forecast(plan)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("about {task.fields[left]} left"),
        console=console,
    ) as progress:
        task = progress.add_task("cells", total=len(cells), left=minutes(plan.remaining_seconds()))

        def on_start(cell: Cell, index: int, total: int) -> None:
            progress.update(task, description=f"measuring {cell.key}")

        def on_done(record: Record, reused: bool) -> None:
            origin = "kept from earlier run" if reused else f"{record.wall_seconds:.0f} s"
            if not reused and (node := record.environment.get("placement", {}).get("node")):
                origin += f" on {node_label(node)}"
            reason = f" - {record.reason[:100]}" if record.reason else ""
            progress.console.print(
                f"{record.cell.key}: [bold]{record.status}[/bold] ({origin}){reason}"
            )
            if record.status == "ok" and kept_out_as_busy(record.metrics, record.environment):
                then = (
                    "its second try"
                    if second_try
                    else "measured again at the end of the run"
                    if busy_rule
                    else "its speed is left out of the tables"
                )
                progress.console.print(
                    f"  [yellow]busy host: other processes used "
                    f"{busy_share(record.metrics):.0%} of the CPU (above {BUSY_SHARE:.0%}); "
                    f"{then}[/yellow]"
                )
            plan.done(record, reused)
            progress.update(task, advance=1, left=minutes(plan.remaining_seconds()))

        def on_flight(flying: Mapping[Cell, str]) -> None:
            progress.update(task, description=in_flight_text(flying))

        def on_retry(cell: Cell, why: str) -> None:
            progress.console.print(
                f"[yellow]{cell.key}: resubmitted to another node ({why})[/yellow]"
            )

        control = dataclasses.replace(
            control, on_start=on_start, on_done=on_done, on_flight=on_flight, on_retry=on_retry
        )
        try:
            result = engine.run(cells, store, control)
            busy = busy_cells(result.records) if busy_rule else []
            if busy:
                second_try = True
                progress.console.print(
                    f"[yellow]{len(busy)} cells measured on a busy host: measuring them once "
                    "more[/yellow]"
                )
                progress.update(task, total=len(cells) + len(busy))
                again = engine.run(busy, store, dataclasses.replace(control, fresh=True))
                redone = {r.cell: r for r in again.records}
                result.records = [redone.get(r.cell, r) for r in result.records]
                result.measured += again.measured
            if busy_rule:
                settle_busy(result.records, store, allow_busy, progress.console)
            return result
        except KeyboardInterrupt:
            progress.console.print(
                f"[yellow]interrupted: finished cells are kept in {store.root}; "
                "run the same command again to resume[/yellow]"
            )
            raise


def busy_cells(records: Sequence[Record]) -> list[Cell]:
    """Cells whose record is ok but measured on a busy host, and not recorded anyway."""
    return [
        r.cell for r in records if r.status == "ok" and kept_out_as_busy(r.metrics, r.environment)
    ]


def settle_busy(
    records: Sequence[Record], store: RecordStore, allow_busy: bool, out: Console
) -> None:
    """After the second measurement: mark the cells still busy as recorded anyway (allow_busy),
    else say they stay out of asv and the tables' speed figures."""
    still = [r for r in records if r.cell in set(busy_cells(records))]
    if not still:
        return
    keys = ", ".join(r.cell.key for r in still[:5]) + (" ..." if len(still) > 5 else "")
    if allow_busy:
        for record in still:
            allow_busy_record(record, store)
        out.print(
            f"[yellow]{len(still)} cells still measured on a busy host, recorded anyway and "
            f"marked (--allow-busy): {keys}[/yellow]"
        )
    else:
        out.print(
            f"[yellow]{len(still)} cells still measured on a busy host: kept out of asv and "
            f"of the tables' speed figures (their records keep the share); measure them on an "
            f"idle host, or record them anyway with --allow-busy: {keys}[/yellow]"
        )


def print_forecast(plan: Forecast, what: str = "cells") -> None:
    """The estimate per framework x workload, before any cell runs."""
    title = f"{what}: estimated {minutes(plan.total_seconds())} (membench/estimate.py)"
    table = Table(title=title)
    for h in ["framework", "workload", what, "estimate", "from"]:
        table.add_column(h)
    for row in plan.rows():
        table.add_row(
            str(row["framework"]), str(row["workload"]), str(row["cells"]),
            minutes(float(row["minutes"]) * 60), str(row["basis"]),
        )  # fmt: skip
    console.print(table)


def in_flight_text(flying: Mapping[Cell, str]) -> str:
    """'3 in flight: nodeA x2, nodeB x1' ('none in flight' between and after cells)."""
    if not flying:
        return "none in flight"
    nodes = ", ".join(f"{node} x{n}" for node, n in sorted(Counter(flying.values()).items()))
    return f"{len(flying)} in flight: {nodes}"


def asv_env(preset: str, store: RecordStore, selection: dict[str, Sequence]) -> dict[str, str]:
    env = dict(os.environ, MEMBENCH_PRESET=preset, MEMBENCH_STORE=str(store.root.resolve()))
    for key, values in selection.items():
        if values:
            env[f"MEMBENCH_{key.upper()}"] = ",".join(str(v) for v in values)
    return env


def asv_commands(
    machine: str, commit: str, host: Mapping[str, object] | None = None
) -> tuple[list[str], list[str]]:
    """The command lines that describe the machine to asv (stable fields only: asv copies the
    description into machine.json and every result's params, so a field that varies between
    hosts of one kind, such as the kernel's build, would split its series) and record stored
    cells for a commit; the machine is described from host (default: this one's
    host_environment)."""
    asv = [sys.executable, "-m", "asv"]
    fields = asv_machine_fields(host or host_environment())
    describe = [sys.executable, "-m", "membench.asv_plugin", "--machine", machine]
    describe += [arg for name, value in fields.items() for arg in (f"--{name}", value)]
    record = [
        # the environment is asv.conf.json's: this interpreter, named apart from its path
        *asv, "run", "--set-commit-hash", commit, "--machine", machine,
        "--record-samples", "--show-stderr", "-a", "processes=1",
        # asv's default starts a fresh interpreter per benchmark run: thousands of them for a
        # preset's cells x metrics, each only reading a stored record; a fork server starts one
        "--launch-method", "forkserver",
    ]  # fmt: skip
    return describe, record


def _machine_and_commit(
    env: dict[str, str], cwd: Path, host: Mapping[str, object] | None = None
) -> tuple[str, str] | None:
    """The machine (this one, or the one host describes: a cluster node's record
    environment), described to asv, and the commit; None outside a git clone."""
    machine = str(host["machine"]) if host else machine_name()
    commit = str(git_commit()["commit"])
    if commit == "unknown":
        console.print("[red]asv needs a git commit: run inside a clone of the repository[/red]")
        return None
    describe, _ = asv_commands(machine, commit, host)
    subprocess.run(describe, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return machine, commit


def run_asv(
    env: dict[str, str],
    bench: Sequence[str],
    cwd: Path = REPO_ROOT,
    host: Mapping[str, object] | None = None,
) -> int:
    """Record the stored cells matching the bench regexes (asv_suite.bench_regexes: the
    selected cells of one preset) as asv results for this commit and machine; asv keeps what
    it recorded before for every other benchmark and parameter set. With host (a record's
    environment), for that record's machine and only the cells measured there (see
    asv_suite.RECORDS_OF)."""
    if host:
        env = dict(
            env, MEMBENCH_MACHINE=str(host["machine"]), MEMBENCH_RECORDS_OF=str(host["machine"])
        )
    if not bench:
        console.print(
            "asv: nothing to record (asv holds each preset's own batch sizes and world size; "
            "cells outside them stay in the records)"
        )
        return 0
    found = _machine_and_commit(env, cwd, host)
    if found is None:
        return 2
    machine, commit = found
    _, record = asv_commands(machine, commit)
    console.print(f"asv: recording results for {machine} at {commit[:12]}")
    for regex in bench:
        record += ["--bench", regex]
    return run_quietly(record, cwd, env)


# With --show-stderr asv prints the reason of every parameter set a benchmark skips (a cell
# the store did not measure, or one its framework refused, whose record says why): a line per
# set and metric, over a thousand for one preset. Errors and everything else pass through.
NA_REASON = "asv: skipped: NotImplementedError"


def run_quietly(cmd: Sequence[str], cwd: Path, env: Mapping[str, str]) -> int:
    """Run asv with its output passed through as it comes, but for the n/a reasons, which
    are counted in one line at the end."""
    skipped = 0
    with subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        encoding="utf-8", errors="replace",
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if line.lstrip().startswith(NA_REASON):
                    skipped += 1
                else:
                    sys.stdout.write(line)
                    sys.stdout.flush()
        except BaseException:  # an interrupt leaves no asv behind
            proc.kill()
            raise
    if skipped:
        console.print(
            f"asv: {skipped} results n/a (a parameter set x metric each: cells the store has "
            "not measured, or that their framework refused; the records say why)"
        )
    return proc.returncode


def machines_of(records: Sequence[Record]) -> dict[str, dict[str, object]]:
    """Each machine the records were measured on, with one record's environment (which holds
    the host's description)."""
    hosts: dict[str, dict[str, object]] = {}
    for record in records:
        machine = record.environment.get("machine")
        if machine and "host_memory_bytes" in record.environment:
            hosts.setdefault(str(machine), record.environment)
    return hosts


def record_versions(
    config: Path, root: Path, machine: str, commit: str, preset: str, bench: Sequence[str],
    cwd: Path = REPO_ROOT,
) -> int:  # fmt: skip
    """Record a sweep's stored cells with asv: one environment per release (config's matrix,
    the `checkout` environment: nothing built), each reading its release's store under root;
    only cells this machine measured, nothing measured by asv."""
    env = dict(
        os.environ, MEMBENCH_PRESET=preset, MEMBENCH_STORE=str(root.resolve()),
        MEMBENCH_MACHINE=machine, MEMBENCH_RECORDS_OF=machine,
    )  # fmt: skip
    if not bench:  # asv with no --bench would visit the whole suite
        console.print("asv: nothing to record (no cell of the selection is in asv's catalogue)")
        return 0
    if _machine_and_commit(env, cwd) is None:
        return 2
    _, record = asv_commands(machine, commit)
    command = [*record, "--config", str(config)]
    for regex in bench:
        command += ["--bench", regex]
    console.print(f"asv: recording the releases' results for {machine} at {commit[:12]}")
    return run_quietly(command, cwd, env)


def describe_machine(cwd: Path = REPO_ROOT) -> str:
    """Describe this machine to asv (asv refuses non-interactive runs until it is described)."""
    machine = machine_name()
    describe, _ = asv_commands(machine, "")
    subprocess.run(describe, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return machine


def results_dir() -> Path:
    return paths.asv_machine(machine_name())
