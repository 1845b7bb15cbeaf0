"""The framework-release sweep (`membench versions`): the same cells under every release of
requirements/versions.txt, each worker started under its release's environment
(.venv-versions/<label>/, membench.releases.versions).

The releases of a framework are interleaved cell by cell: a cell is measured under each
release in turn before the next cell starts, so that two releases' speeds are minutes apart
on one host, never a day apart on two. Records go to one store per release inside the
sweep's folder (results/records/<machine>/versions-<preset>-<commit>/<label>/); a sweep
resumes where it stopped, as every run does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from membench import registry
from membench.cells import supervision
from membench.cells.estimate import Forecast, History, forecast
from membench.cells.planning import refused_record
from membench.records import Cell, Record, RecordStore
from membench.releases.versions import environment_python
from membench.stacks import Stack

STACK_ENV = "MEMBENCH_STACK"  # the release's spec, as asv's version matrix names it


@dataclass(frozen=True)
class Step:
    """One measurement of the sweep: a cell under one release."""

    cell: Cell
    stack: Stack


def release_order(stack: Stack) -> tuple:
    """Oldest release first (2.9 before 2.13), a release on its own interpreter before its
    bridge to a newer one; a version that is not PEP 440 sorts last."""
    try:
        return (stack.framework, 0, Version(stack.version), stack.python or "")
    except InvalidVersion:
        return (stack.framework, 1, stack.version, stack.python or "")


def plan(cells: Sequence[Cell], stacks: Sequence[Stack]) -> list[Step]:
    """Every cell under every release of its framework, the releases of a cell adjacent and
    oldest first; a cell whose framework has no release listed is left out."""
    ordered = sorted(stacks, key=release_order)
    return [Step(c, s) for c in cells for s in ordered if s.framework == c.framework]


def warm_up(steps: Sequence[Step]) -> list[Step]:
    """The steps whose first step reads a compile cache their framework keeps on disk (Jittor's
    kernels, Inductor's): measured once into a scratch store before the sweep, so that every
    release meets a warm cache (JAX compiles in every process: nothing to warm)."""
    return [
        s for s in steps
        if registry.framework(s.cell.framework).caches_compiles(s.cell.strategy)
    ]  # fmt: skip


def store_of(root: Path, stack: Stack) -> RecordStore:
    """A release's store inside the sweep's folder."""
    return RecordStore(root / stack.label)


def control_for(control: supervision.RunControl, stack: Stack) -> supervision.RunControl:
    """The run's control with the release's interpreter for its framework's workers, which
    record the release's label from MEMBENCH_STACK in their environment, as asv's would."""
    python = str(environment_python(stack))
    env = {**control.worker.env, STACK_ENV: stack.spec}
    worker = dataclasses.replace(control.worker, env=env)
    return dataclasses.replace(control, interpreters={stack.framework: python}, worker=worker)


def sweep_history(steps: Sequence[Step], roots: Sequence[Path], machine: str) -> History:
    """One reading of the machine's records for a sweep's estimates: every release's store
    under each of roots (the sweep's, the warm-up's) among them."""
    stacks = dict.fromkeys(step.stack for step in steps)
    return History.of_machine(machine, [store_of(r, s).root for r in roots for s in stacks])


def forecasts(
    steps: Sequence[Step], root: Path, machine: str, control: supervision.RunControl,
    history: History | None = None,
) -> dict[str, Forecast]:  # fmt: skip
    """Per release, the estimate of its cells (the runner's resume rule applied, so a
    resumed sweep counts only what is left); history: the records read once for several
    forecasts (sweep_history), else read here."""
    cells: dict[Stack, list[Cell]] = {}
    for step in steps:
        cells.setdefault(step.stack, []).append(step.cell)
    history = history or sweep_history(steps, [root], machine)
    return {
        stack.label: forecast(
            found, store_of(root, stack), machine, control.fresh, control.retry_failed,
            control.timeout, supervision.resume_cap(control), history, stack.label,
        )
        for stack, found in cells.items()
    }  # fmt: skip


OnStep = Callable[[Step, int, int], None]
OnRecord = Callable[[Step, Record, bool], None]


def run(
    steps: Sequence[Step],
    root: Path,
    control: supervision.RunControl = supervision.DEFAULT_CONTROL,
    on_step: OnStep | None = None,
    on_record: OnRecord | None = None,
    unsupported: Mapping[str, str] | None = None,
) -> list[tuple[Step, Record]]:
    """Measure the steps in order, each into its release's store (a stored ok, oom or
    unsupported record is kept, as in every run). Stops at control.deadline like the runner:
    the steps not started are left for a rerun. unsupported: releases that cannot run here
    (label -> why): their cells are recorded unsupported with the reason, no worker."""
    done = []
    for i, step in enumerate(steps):
        if on_step:
            on_step(step, i, len(steps))
        if why := (unsupported or {}).get(step.stack.label):
            record = refused_record(
                step.cell, why, control_for(control, step.stack).worker.worker_env()
            )
            store_of(root, step.stack).put(record)
            done.append((step, record))
            if on_record:
                on_record(step, record, False)
            continue
        result = supervision.run(
            [step.cell], store_of(root, step.stack), control_for(control, step.stack)
        )
        for record in result.records:
            done.append((step, record))
            if on_record:
                on_record(step, record, result.reused > 0)
        if result.deferred:
            break
    return done
