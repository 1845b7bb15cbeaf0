"""Recording with asv: describe the machine, then record a store's cells as asv results for a
commit (one preset's, or a release sweep's one environment per release)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console

from membench import paths
from membench.environment import (
    REPO_ROOT,
    asv_machine_fields,
    git_commit,
    host_environment,
    machine_name,
)
from membench.records import Record, RecordStore

console = Console(stderr=True)


def asv_env(preset: str, store: RecordStore, selection: dict[str, Sequence]) -> dict[str, str]:
    """The environment of asv's processes: asv starts its own process for the suite, which
    knows the run's preset, store and selection (MEMBENCH_WORKLOADS, _FRAMEWORKS,
    _STRATEGIES, _BATCH_SIZES, _WORLD_SIZE) only from these variables; membench.publish.
    asv_suite reads them back."""
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
    describe = [sys.executable, "-m", "membench.publish.asv_plugin", "--machine", machine]
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
