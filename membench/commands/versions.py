"""membench versions: the same cells under every framework release of
requirements/versions.txt, releases interleaved cell by cell (membench.releases.sweep), recorded
with asv, one asv environment per release."""

from __future__ import annotations

import argparse
import sys
import time

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from membench import argtypes, paths, registry
from membench.commands.parsing import console, fail
from membench.commands.run_options import (
    RunOptions,
    add_engine,
    add_estimate,
    add_timeout_fresh,
    add_writer,
)
from membench.commands.selection import (
    Selection,
    add_batch,
    add_names,
    plan_cells,
    refuse_gpu_preset_here,
)
from membench.commands.store_guard import dirty_results, one_writer

WITHOUT_RAY = (
    "--engine ray does not apply: a sweep measures each cell under every release of its "
    "framework one after the other on one host, so that their speeds compare; run `membench "
    "versions` on each machine"
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "versions",
        help="the same cells under every framework release of requirements/versions.txt, "
        "releases interleaved cell by cell; --new: releases the registry serves beyond them",
        epilog="examples: membench versions --estimate; membench versions --only jax "
        "-w transformer; membench versions --new",
    )
    add_names(p, "workload", "framework", "strategy")
    add_batch(p)
    p.add_argument(
        "-p", "--preset", type=argtypes.name, default=registry.RELEASES_PRESET,
        help=f"the cells' preset (default: {registry.RELEASES_PRESET})",
    )  # fmt: skip
    p.add_argument(
        "--only", type=argtypes.names,
        help="frameworks or releases, e.g. jax or jax-0.8.3 (default: every one listed)",
    )  # fmt: skip
    p.add_argument(
        "--setup", action="store_true",
        help="install the releases' environments (.venv-versions/) and stop; a sweep installs "
        "the missing ones itself",
    )  # fmt: skip
    p.add_argument(
        "--new", action="store_true",
        help="ask the package index which releases are newer than the newest listed and print "
        "the line each would add (after a dry-run resolve); changes nothing",
    )  # fmt: skip
    p.add_argument(
        "--store", type=argtypes.writable_dir,
        help="the sweep's folder (default: results/records/<machine>/versions-<preset>-<commit>;"
        " asv records only a sweep under results/)",
    )  # fmt: skip
    p.add_argument(
        "--round", type=argtypes.positive_int, default=1,
        help="which run of the sweep: 2, 3 ... repeat every cell into the sweep's round-N/, "
        "so that each verdict's noise is the runs' range (default 1: asv records it)",
    )  # fmt: skip
    add_timeout_fresh(p)
    add_estimate(p, "print the sweep's time estimate and exit")
    add_writer(p)
    add_engine(p)
    p.set_defaults(func=main)


VERSIONS_FRAMEWORK = "framework in requirements/versions.txt"


def main(args: argparse.Namespace) -> int:
    from membench.environment import detected_device
    from membench.releases.versions import read_stacks, select_stacks

    if args.engine == "ray":
        return fail(WITHOUT_RAY, "membench versions")
    stacks = read_stacks()
    if args.new:  # --only and -f name frameworks here: a release is what --new looks for
        listed = sorted({s.framework for s in stacks})
        for name in args.only or []:
            if name not in listed:
                raise registry.UnknownNameError(VERSIONS_FRAMEWORK, name, listed)
        wanted = set(args.only or listed) & set(args.framework or listed)
        return print_new([s for s in stacks if s.framework in wanted])
    device = "gpu" if detected_device() == "cuda" else "cpu"
    stacks = select_stacks(stacks, device, args.only)
    if args.framework:
        stacks = [s for s in stacks if s.framework in args.framework]
    if not stacks:
        return fail(f"no framework releases listed for {device} machines in this selection")
    if args.setup:
        return 0 if setup(stacks)[0] else 1
    return sweep(args, stacks)


def setup(stacks: list) -> tuple[bool, dict[str, str]]:
    """Install every release's environment that is not ready: whether all that can be were,
    and the releases no interpreter here can run (label -> why: their cells are measured as
    unsupported, with the reason)."""
    from membench.releases.pythons import NoInterpreter
    from membench.releases.versions import ENVIRONMENTS, is_ready, setup_stack

    ok, unsupported = True, {}
    log_dir = ENVIRONMENTS / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    for stack in stacks:
        if is_ready(stack):
            continue
        log_path = log_dir / f"{stack.label}.log"
        console.print(f"installing {stack.label} ({stack.spec}) into {ENVIRONMENTS}/ ...")
        t0 = time.monotonic()
        with open(log_path, "w") as log:
            try:
                choice = setup_stack(stack, log)
            except NoInterpreter as exc:
                unsupported[stack.label] = f"{stack.label} cannot run here: {exc}"
                console.print(f"[yellow]{stack.label}: unsupported here ({exc})[/yellow]")
                continue
            except Exception as exc:  # a release that will not install: say why, go on
                ok = False
                console.print(f"[red]{stack.label} not installed ({exc}); see {log_path}[/red]")
                continue
        console.print(
            f"{stack.label} ready on Python {choice.python} ({choice.why}; "
            f"{time.monotonic() - t0:.0f} s)"
        )
    return ok, unsupported


def print_new(stacks: list) -> int:
    """Releases newer than the newest listed, per framework, as every interpreter found here
    sees the index (a release may need a newer Python than the project's), and the line each
    would add; a bridge line where the new release needs another interpreter than the newest
    listed (that release measured again on the new one, so a verdict names the release)."""
    from packaging.version import Version

    from membench.releases.pythons import found_pythons, own, preferred
    from membench.releases.sweep import release_order
    from membench.releases.versions import (
        dry_run,
        index_versions,
        newer_releases,
        proposed_spec,
        seen_by,
    )

    # newer releases drop old interpreters, they do not add them: the project's and newer
    pythons = {m: p for m, p in found_pythons().items() if Version(m) >= Version(own())}
    console.print(f"asking the package index as Python {', '.join(sorted(pythons, key=Version))}")
    by_framework: dict[str, list] = {}
    for stack in sorted(stacks, key=release_order):
        if not stack.python:  # a bridge line is no release of its own
            by_framework.setdefault(stack.framework, []).append(stack)
    for framework, listed in by_framework.items():
        distribution = registry.framework(framework).distribution
        served = {
            minor: index_versions(distribution, (path, "-m", "pip"))
            for minor, path in pythons.items()
        }
        seen = seen_by(served)
        if not seen:
            console.print(f"{framework}: the package index could not be asked ({distribution})")
            continue
        newer = newer_releases(listed, list(seen))
        if not newer:
            console.print(
                f"{framework}: nothing newer than {listed[-1].version} on the index (asked as "
                f"Python {', '.join(sorted(served, key=Version))})"
            )
            continue
        newest = listed[-1]
        runs_on = preferred(seen.get(newest.version.split("+")[0], [own()]))
        bridged = any(s.python and s.version == newest.version for s in stacks)
        for version in newer:
            python = preferred(seen[version])
            spec = proposed_spec(newest, version)
            devices = ",".join(newest.devices)
            why = dry_run(spec, (pythons[python], "-m", "pip"))
            if why:
                console.print(f"{framework} {version}: does not resolve here ({why})")
                continue
            needs = "" if python == own() else f"  # Requires-Python: Python {python} or newer"
            print(f"{devices}  {spec}{needs}")
            if python != runs_on and not bridged:
                bridged = True
                print(f"{devices}  {newest.spec} python=={python}  # the bridge: "
                      f"{newest.version} on {python}")  # fmt: skip
    console.print("nothing was added: copy a line into requirements/versions.txt to measure it")
    return 0


def sweep(args: argparse.Namespace, stacks: list) -> int:
    from membench.environment import git_commit, machine_name
    from membench.releases import sweep as sweeping

    preset = registry.preset(args.preset).name
    refuse_gpu_preset_here(preset)
    frameworks = sorted({s.framework for s in stacks})
    selection = Selection.filled(preset, args.workload, frameworks, args.strategy, args.batch)
    cells = plan_cells(selection, preset, args.strategy or [])
    steps = sweeping.plan(cells, stacks)
    commit = str(git_commit()["commit"])
    machine = machine_name()
    root = paths.sweep_round(
        args.store or paths.versions_store(machine, preset, commit), args.round
    )
    opts = RunOptions.of(args)
    control = opts.control()
    console.print(
        f"{len(steps)} measurements: {len(cells)} cells x {len(stacks)} releases "
        f"({', '.join(s.label for s in sorted(stacks, key=sweeping.release_order))}), preset "
        f"{preset}; records in {root}/<release>"
    )
    if args.estimate:
        return print_estimate(steps, root, machine, control)
    if why := dirty_results(root):
        return fail(why, "membench versions")
    installed, unsupported = setup(stacks)
    if not installed:
        return fail("some releases could not be installed (above); --only the others")
    with one_writer(opts, root) as run_opts:
        done = measure(steps, root, machine, run_opts.control(), unsupported)
    if done is None:
        return 130
    if not root.resolve().is_relative_to(paths.RESULTS.resolve()) or args.round > 1:
        console.print(
            f"records in {root}; asv records a sweep's first round under {paths.RESULTS} only"
        )
        return 0
    return record_asv(stacks, root, machine, commit, preset, selection)


def print_estimate(steps, root, machine: str, control) -> int:
    from membench.cells.estimate import minutes
    from membench.cells.progress import print_forecast
    from membench.releases.sweep import forecasts, sweep_history, warm_up

    history = sweep_history(steps, [root, paths.warm_store(machine)], machine)  # read once
    left = forecasts(steps, root, machine, control, history)
    whole = forecasts(steps, root, machine, _fresh(control), history)
    for label, plan in whole.items():
        print_forecast(plan, f"{label} cells")
    # the compile caches' warm-up runs first, into a scratch store: part of the sweep's time
    warm = warm_up(steps)
    warming = forecasts(warm, paths.warm_store(machine), machine, control, history)
    warm_left = sum(p.remaining_seconds() for p in warming.values())
    total = sum(p.total_seconds() for p in whole.values())
    remaining = sum(p.remaining_seconds() for p in left.values())
    console.print(
        f"the whole sweep: estimated {minutes(total)} and {minutes(warm_left)} to warm "
        f"{len(warm)} cells' compile caches first; left to measure here: {minutes(remaining)}"
        " (cells kept in the store cost nothing)"
    )
    console.print("nothing measured (--estimate)")
    return 0


def measure(steps, root, machine: str, control, unsupported: dict[str, str] | None = None):
    """The sweep with a progress bar and a line per measurement; None when interrupted.
    unsupported: the releases that cannot run here (label -> why), recorded so."""
    from membench.cells.estimate import minutes
    from membench.cells.progress import busy_cells
    from membench.releases import sweep as sweeping

    history = sweeping.sweep_history(steps, [root, paths.warm_store(machine)], machine)
    plans = sweeping.forecasts(steps, root, machine, control, history)
    remaining = sum(p.remaining_seconds() for p in plans.values())
    warm = sweeping.warm_up(steps)
    warming = sweeping.forecasts(warm, paths.warm_store(machine), machine, control, history)
    expected = remaining + sum(p.remaining_seconds() for p in warming.values())
    console.print(
        f"estimated {minutes(expected)} to measure, the compile caches' warm-up included "
        "(membench/cells/estimate.py)"
    )
    started = time.monotonic()
    busy: set = set()  # steps measured on a busy host, measured again at the end
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TextColumn("about {task.fields[left]} left"), console=console,
    ) as progress:  # fmt: skip
        task = progress.add_task("sweep", total=len(steps), left=minutes(remaining))

        def on_step(step, index: int, total: int) -> None:
            progress.update(task, description=f"{step.stack.label} {step.cell.key}")

        def on_record(step, record, reused: bool) -> None:
            plans[step.stack.label].done(record, reused)
            left = sum(p.remaining_seconds() for p in plans.values())
            progress.update(task, advance=1, left=minutes(left))
            if reused:
                return
            reason = f" - {record.reason[:90]}" if record.reason else ""
            progress.console.print(
                f"{step.stack.label} {record.cell.key}: [bold]{record.status}[/bold] "
                f"({record.wall_seconds:.0f} s){reason}"
            )
            if busy_cells([record]):
                busy.add(step)

        def warmed(step, record, reused: bool) -> None:
            progress.update(task, advance=1)
            if not reused:
                progress.console.print(
                    f"warm-up {step.stack.label} {record.cell.key}: {record.status} "
                    f"({record.wall_seconds:.0f} s)"
                )

        try:
            if warm:
                progress.console.print(
                    f"warming the compile caches first: {len(warm)} cells read one their "
                    f"framework keeps on disk (into {paths.warm_store(machine)})"
                )
                progress.update(task, total=len(steps) + len(warm))
                sweeping.run(warm, paths.warm_store(machine), control, on_step, warmed)
            done = sweeping.run(steps, root, control, on_step, on_record, unsupported)
            if busy:  # once more at the end, as `membench bench` does
                progress.console.print(
                    f"[yellow]{len(busy)} measurements on a busy host: measured again[/yellow]"
                )
                again = [s for s in steps if s in busy]
                progress.update(task, total=progress.tasks[0].total + len(again))
                done += sweeping.run(again, root, _fresh(control), on_step, on_record)
        except KeyboardInterrupt:
            console.print("[yellow]interrupted: every finished cell is kept; rerun to resume")
            return None
    console.print(took(time.monotonic() - started, expected))
    return done


def took(seconds: float, expected: float) -> str:
    """The sweep's time against the estimate it started with."""
    from membench.cells.estimate import minutes

    said = f"measured in {minutes(seconds)}; estimated {minutes(expected)} before it began"
    if seconds <= 0:
        return said
    error = (expected - seconds) / seconds
    return f"{said} (the estimate {abs(error):.0%} {'over' if error > 0 else 'under'})"


def _fresh(control):
    import dataclasses

    return dataclasses.replace(control, fresh=True)


def record_asv(stacks, root, machine: str, commit: str, preset: str, selection) -> int:
    """asv records the stored cells: one environment per release (nothing built)."""
    from membench.publish.asv_run import record_versions
    from membench.publish.asv_suite import bench_regexes
    from membench.releases.versions import write_asv_config

    config = write_asv_config(stacks)
    regexes = bench_regexes(preset, selection.for_asv())
    rc = record_versions(config, root, machine, commit, preset, regexes)
    if rc:
        print(f"membench versions: asv ended with status {rc}", file=sys.stderr)
    return rc
