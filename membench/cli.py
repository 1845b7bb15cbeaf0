"""membench command line: list, run, bench, versions, compare, report, show."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

from membench import argtypes, memory_cap, paths, registry, runner, timeline
from membench.argtypes import MAX_BATCH, batch_size, positive_int, positive_seconds
from membench.engines import ENGINES, Engine, EngineError, engine_for
from membench.records import (
    RecordNotSavedError,
    RecordStore,
    StoreFullError,
    write_json_atomic,
)
from membench.store_lock import StoreLockedError, store_lock
from membench.summary import print_table
from membench.versions import VersionsFileError

console = Console(width=160)


class BadInput(ValueError):
    """Input refused before any work, found after parsing (main: one line, exit 2)."""


def fail(message: str, prog: str = "membench") -> int:
    """A refusal: one line on stderr, exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


# -w, -f, -s: comma-separated, and repeatable (`-s a -s b` is `-s a,b`, never the last one only)
NAMES_ALL = "comma-separated or repeated (default: all)"
NAMES_INSTALLED = "comma-separated or repeated (default: installed)"


@contextmanager
def _one_writer(args: argparse.Namespace, root: Path) -> Iterator[None]:
    """What a command that measures holds while it runs: the memory cap per cell in force
    (MEMBENCH_MEMORY_CAP, read by the runner: --memory-cap, else the default of the memory
    available now; a Ray run leaves the default to each node), the timeline where asked
    (MEMBENCH_TIMELINE) and the store's lock."""
    from membench.capacity import scoped_environ

    cap = getattr(args, "memory_cap", None)
    if cap is None and getattr(args, "engine", "local") == "local":
        cap = memory_cap.default_cap()
    env = {memory_cap.ENV: f"{cap:.0f}"} if cap is not None else {}
    if cap is not None:
        console.print(f"memory cap per cell: {cap / 2**30:.2f} GiB resident (--memory-cap)")
    if getattr(args, "trace", False):
        env[runner.TRACE_ENV] = "1"
        console.print(
            "framework memory views (--trace): after each measured cell, a worker of its own "
            "runs a step under the framework's view, into the store's traces/"
        )
    if getattr(args, "timeline", False):
        env[timeline.ENV] = "1"
        console.print(
            f"memory timeline per cell: sampled every {timeline.INTERVAL_SECONDS * 1000:.0f} ms "
            "(--timeline), in the store's timelines/"
        )

    def waiting(text: str) -> None:
        console.print(f"[yellow]{text}[/yellow]")

    with scoped_environ(env), store_lock(root, getattr(args, "wait", False), waiting):
        yield


@contextmanager
def _engine(args: argparse.Namespace) -> Iterator[Engine]:
    """The engine the command line chose (local when the caller names none), connected, and
    closed afterwards."""
    name = getattr(args, "engine", "local")
    address = getattr(args, "address", None)
    engine = engine_for(name, address, getattr(args, "cells_per_node", 1))
    if name == "ray":
        console.print(
            f"engine ray: cluster {address or 'started on this machine'} (Ray's own log: "
            ".membench/ray.log)"
        )
    engine.connect()
    try:
        yield engine
    finally:
        engine.close()


def cmd_list(args: argparse.Namespace) -> int:
    from membench.environment import default_preset, machine_name

    if args.matrix:
        return print_matrix(args.markdown)

    t = Table(title="workloads")
    t.add_column("name")
    t.add_column("description")
    t.add_column("frameworks with a model")
    for w in registry.WORKLOADS.values():
        t.add_row(w.name, w.description, ", ".join(w.model_modules))
    console.print(t)

    from membench.support_matrix import changed_knobs

    # one column per knob no longer fits a terminal: the knobs each strategy changes
    t = Table(title="strategies")
    for h in ["name", "description", "knobs (changed from the baseline)"]:
        t.add_column(h)
    for s in registry.STRATEGIES.values():
        knobs = ", ".join(f"{k}={v}" for k, v in changed_knobs(s).items()) or "(baseline)"
        t.add_row(s.name, s.description, knobs)
    console.print(t)

    t = Table(title=f"presets (default here: {default_preset()})")
    for h in ["name", "description", "workload", "inputs", "batch sizes"]:
        t.add_column(h)
    for p in registry.PRESETS.values():
        for w, size in p.sizes.items():
            t.add_row(p.name, p.description, w, str(size.inputs), str(list(size.batch_sizes)))
    console.print(t)

    t = Table(title="cells a preset leaves to another (minutes each where it promises seconds)")
    for h in ["preset", "frameworks", "workloads", "strategies", "why"]:
        t.add_column(h)
    for p in registry.PRESETS.values():
        for rule in p.left_out + p.capacity_left_out:
            names = [
                ", ".join(n) or "all" for n in (rule.frameworks, rule.workloads, rule.strategies)
            ]
            search = " (capacity search only)" if rule in p.capacity_left_out else ""
            t.add_row(p.name, *names, rule.reason + search)
    console.print(t)

    t = Table(title=f"frameworks (machine: {machine_name()})")
    for h in ["name", "description", "installed here"]:
        t.add_column(h)
    for f in registry.FRAMEWORKS.values():
        t.add_row(f.name, f.description, "yes" if registry.framework_installed(f.name) else "no")
    console.print(t)
    return 0


def print_matrix(markdown: bool) -> int:
    """The framework x strategy table from the backends' declared support."""
    from membench import support_matrix

    if markdown:
        print(support_matrix.markdown(), end="")
        return 0
    t = Table(title="strategy support (declared by each backend)", show_lines=True)
    names = list(registry.FRAMEWORKS)
    for h in ["strategy", "knobs", *names]:
        t.add_column(h, overflow="fold")
    for row in support_matrix.matrix(names):
        t.add_row(row["strategy"], row["knobs"], *(row[f] for f in names))
    console.print(t)
    return 0


def _selection(args: argparse.Namespace, preset: str) -> dict[str, list]:
    return {
        # default: every workload the preset sizes
        "workloads": args.workload or list(registry.preset(preset).sizes),
        "frameworks": args.framework
        or [f for f in registry.FRAMEWORKS if registry.framework_installed(f)],
        "strategies": args.strategy
        or list(registry.preset(preset).strategies or registry.STRATEGIES),
        "batch_sizes": args.batch or [],
        # ranks of the sharding strategies' cells (default: the preset's)
        "world_size": [args.world_size] if getattr(args, "world_size", None) else [],
    }


def world_size_refusal(args: argparse.Namespace) -> str | None:
    """Why --world-size cannot be taken (None: it can): a named strategy that does not shard,
    or more ranks than this machine has cores (CPU) or devices (GPU)."""
    ranks = getattr(args, "world_size", None)
    if not ranks:
        return None
    for name in args.strategy or []:
        if registry.strategy(name).sharding == "none":
            return f"--world-size: strategy {name} does not shard (it runs on one rank)"
    from membench.environment import detected_device, gpu_info

    if detected_device() == "cuda":
        bound, what = int((gpu_info() or {}).get("gpu_count", 1)), "GPUs"
    else:
        bound, what = os.cpu_count() or 1, "CPU cores"
    if ranks > bound:
        return f"--world-size {ranks}: this machine has {bound} {what} (one rank each at most)"
    return None


def _plan(args: argparse.Namespace, preset: str):
    if why := world_size_refusal(args):
        raise BadInput(why)
    sel = _selection(args, preset)
    cells = runner.plan(
        sel["workloads"], sel["frameworks"], sel["strategies"], preset, sel["batch_sizes"],
        (sel["world_size"] or [None])[0],
    )  # fmt: skip
    skipped = runner.left_out(sel["workloads"], sel["frameworks"], sel["strategies"], preset)
    for reason, n in skipped.items():
        console.print(f"preset {preset} leaves {n} cells to another preset: {reason}")
    return sel, cells


def _trace_refusal(args: argparse.Namespace) -> str | None:
    """--trace writes its views into the store beside the worker: not on a Ray node's."""
    if getattr(args, "trace", False) and getattr(args, "engine", "local") != "local":
        return "--trace runs with the local engine only (a node's views would stay on the node)"
    return None


def cmd_run(args: argparse.Namespace) -> int:
    from membench.bench import run_with_progress
    from membench.environment import default_preset, machine_name

    if why := _trace_refusal(args):
        return fail(why, "membench run")
    preset = registry.preset(args.preset or default_preset()).name
    _, cells = _plan(args, preset)
    store = RecordStore(args.store or paths.local_store(machine_name(), preset))
    console.print(f"{len(cells)} cells, preset {preset}, records in {store.root}")
    if args.estimate:
        return _print_estimate(cells, store, args)
    if why := dirty_results(store.root):  # e.g. a timeline store under results/timelines
        return fail(why, "membench run")
    with _one_writer(args, store.root), _engine(args) as engine:
        result = run_with_progress(
            cells, store, args.timeout, args.fresh, not args.keep_failed, engine
        )
    print_table(result.records, f"membench run: preset {preset} ({store.root})")
    console.print(f"measured {result.measured}, kept from an earlier run {result.reused}")
    return 0


def _print_estimate(
    cells: list, store: RecordStore, args: argparse.Namespace, plans: Sequence = ()
) -> int:
    """--estimate: the plan's time, cells and capacity probes, and nothing measured."""
    from membench.bench import print_forecast
    from membench.capacity_run import forecast_searches
    from membench.environment import machine_name
    from membench.estimate import forecast, minutes

    run = forecast(cells, store, machine_name(), args.fresh, not args.keep_failed, args.timeout)
    print_forecast(run)
    total = run.total_seconds()
    if plans:
        probes = forecast_searches(plans, machine_name())
        print_forecast(probes, "capacity probes")
        total += probes.total_seconds()
    console.print(f"estimated {minutes(total)} in all; nothing measured (--estimate)")
    return 0


def capacity_plans(preset: str, sel: dict[str, list], args: argparse.Namespace) -> list:
    """The bench's capacity searches: one per workload its preset gives a budget, over the
    selected frameworks and strategies (none with --no-capacity or an explicit batch)."""
    from membench.capacity import budget_for
    from membench.capacity_run import plan_searches
    from membench.environment import detected_device, git_commit, machine_name

    p = registry.preset(preset)
    if args.no_capacity or args.batch or detected_device() == "cuda":
        return []
    machine, commit = machine_name(), str(git_commit()["commit"])
    for rule in p.capacity_left_out:
        if any(
            rule.covers(f, w, s)
            for f in sel["frameworks"] for w in sel["workloads"] for s in sel["strategies"]
        ):  # fmt: skip
            console.print(f"preset {preset} leaves capacity searches out: {rule.reason}")
    return [
        plan_searches(
            preset, w, sel["frameworks"], sel["strategies"],
            budget_for("cpu", p.capacity_budgets[w]), machine, commit, p.capacity_max_batch,
            main_job=True,
        )
        for w in sel["workloads"]
        if w in p.capacity_budgets
    ]  # fmt: skip


def dirty_results(destination: Path) -> str | None:
    """Why a run may not write into results/: records there name the commit that measured
    them, which uncommitted code changes would make untrue (a store elsewhere is fine)."""
    from membench.environment import CODE_PATHS, git_commit

    inside = destination.resolve().is_relative_to(paths.RESULTS.resolve())
    if inside and git_commit().get("dirty"):
        return (
            f"uncommitted changes under {', '.join(CODE_PATHS)}: results/ holds only what a "
            "commit measured; commit first, or give --store outside results/"
        )
    return None


def cmd_bench(args: argparse.Namespace) -> int:
    from membench.asv_suite import bench_regexes, default_store
    from membench.bench import asv_env, machines_of, results_dir, run_asv, run_with_progress
    from membench.environment import default_preset

    if why := _trace_refusal(args):
        return fail(why, "membench bench")
    preset = registry.preset(args.preset or default_preset()).name
    sel, cells = _plan(args, preset)
    store = RecordStore(args.store or default_store(preset))
    searches = capacity_plans(preset, sel, args)
    console.print(f"{len(cells)} cells, preset {preset}, records in {store.root}")
    if args.estimate:
        return _print_estimate(cells, store, args, searches)
    if why := dirty_results(store.root):
        return fail(why, "membench bench")
    deadline = getattr(args, "deadline", None)
    with _one_writer(args, store.root), _engine(args) as engine:
        result = run_with_progress(
            cells, store, args.timeout, args.fresh, not args.keep_failed, engine, deadline,
            busy_rule=True, allow_busy=getattr(args, "allow_busy", False),
        )  # fmt: skip
    if result.deferred:
        console.print(
            f"[yellow]{len(result.deferred)} cells not started (time is up): run the same "
            "command again to measure them[/yellow]"
        )
    regexes = bench_regexes(preset, sel)
    if engine.name == "local":
        rc = run_asv(asv_env(preset, store, sel), regexes)
    else:  # asv's history per machine: identical nodes share one, mixed ones get several
        hosts = machines_of(result.records)
        rc = max(
            [run_asv(asv_env(preset, store, sel), regexes, host=h) for h in hosts.values()] or [0]
        )
    print_table(result.records, f"membench bench: preset {preset}")
    where = results_dir() if engine.name == "local" else results_dir().parent
    console.print(f"asv results: {where}; records: {store.root}")
    if searches and not result.deferred:
        rc = max(rc, bench_capacity(searches, args))
    return rc


def bench_capacity(searches: list, args: argparse.Namespace) -> int:
    """The bench's last part: each workload's capacity searches, then the decision tables."""
    from membench.bench import console as progress_console
    from membench.bench import print_forecast
    from membench.capacity_run import forecast_searches, run_searches
    from membench.environment import machine_name
    from membench.summary import print_decisions

    machine = machine_name()
    print_forecast(forecast_searches(searches, machine), "capacity probes")
    with _engine(args) as engine:
        for plan in searches:
            with _one_writer(args, plan.folder):
                run_searches(plan, engine, progress_console.print, machine=machine)
    print_decisions(paths.RESULTS, machine, searches[0].preset, [p.folder.name for p in searches])
    return 0


VERSIONS_WITHOUT_RAY = (
    "--engine ray does not apply: asv builds one virtualenv per framework version on this "
    "machine and measures every cell inside asv's own benchmark process there, so there is "
    "no cell to hand to a Ray task on another node. Run `membench versions` on each machine "
    "(or spread `membench bench --engine ray` over the cluster for the default environment)."
)


def cmd_versions(args: argparse.Namespace) -> int:
    from membench.asv_suite import bench_regexes
    from membench.bench import asv_env, run_versions
    from membench.environment import default_preset, detected_device, git_commit, machine_name
    from membench.versions import read_stacks, select_stacks, write_asv_config

    if args.engine == "ray":
        return fail(VERSIONS_WITHOUT_RAY, "membench versions")
    preset = registry.preset(args.preset or default_preset()).name
    device = "gpu" if detected_device() == "cuda" else "cpu"
    stacks = select_stacks(read_stacks(), device, args.only)
    if not stacks:
        return fail(f"no framework versions listed for {device} machines")
    store = RecordStore(paths.versions_store(machine_name(), preset, str(git_commit()["commit"])))
    if why := dirty_results(store.root):
        return fail(why, "membench versions")
    config = write_asv_config(stacks, str(git_commit()["commit"]))
    selection = {
        "workloads": args.workload or [],
        "strategies": args.strategy or [],
        "batch_sizes": args.batch or [],
    }
    console.print(
        f"{len(stacks)} framework versions ({', '.join(s.label for s in stacks)}), "
        f"preset {preset}; records in {store.root}/<version>; asv config {config}"
    )
    return run_versions(config, asv_env(preset, store, selection), bench_regexes(preset, selection))


# compare's exit status when some record files could not be read (1: a regression, 2: input)
INCOMPLETE = 3


def cmd_compare(args: argparse.Namespace) -> int:
    from analysis.compare import SideError, compare, format_value, regressions, resolve_side
    from analysis.loader import load
    from membench.metrics import change_floor
    from membench.metrics import metric as catalogue_entry

    loaded = load(args.results)
    for problem in loaded.problems:
        console.print(f"[yellow]{problem}[/yellow]")
    unreadable = len(loaded.unreadable)
    frame = loaded.frame
    for column, wanted in [
        ("workload", args.workload), ("strategy", args.strategy), ("batch_size", args.batch)
    ]:  # fmt: skip
        if wanted:
            frame = frame[frame[column].isin(wanted)]
    try:
        base, new = resolve_side(frame, args.base), resolve_side(frame, args.new)
    except SideError as exc:
        return fail(str(exc), "membench compare")
    table = compare(base, new, args.metric, args.threshold)
    if table.empty:
        console.print(f"no cell measured on both sides ({base.text}, {new.text})")
        return 2
    shown = table if args.all else table[table["verdict"] != "unchanged"]
    t = Table(title=f"{base.text} ({base.kind}) -> {new.text} ({new.kind})")
    keys = [c for c in ["workload", "framework", "strategy", "batch_size"] if c in table]
    for h in [*keys, "metric", "base", "new", "change", "threshold", "verdict", "note"]:
        t.add_column(h, overflow="fold")
    colour = {"regression": "red", "improvement": "green", "unchanged": "white"}
    colour["busy host"] = "yellow"
    for r in shown.to_dict("records"):
        change = "" if r["metric"] == "status" else f"{r['change']:+.1%}"
        threshold = (
            ""
            if r["metric"] == "status"
            else f"{r['threshold']:.1%}, {format_value(r['metric'], change_floor(r['metric']))}"
        )
        label = catalogue_entry(r["metric"]).label if r["metric"] != "status" else "status"
        t.add_row(
            *(str(r[k]) for k in keys), label,
            format_value(r["metric"], r["base"]), format_value(r["metric"], r["new"]),
            change, threshold, f"[{colour[r['verdict']]}]{r['verdict']}[/]", str(r["note"])[:60],
        )  # fmt: skip
    console.print(t)
    counts = table["verdict"].value_counts()
    console.print(
        f"{counts.get('regression', 0)} regressions, {counts.get('improvement', 0)} "
        f"improvements, {counts.get('unchanged', 0)} unchanged (within threshold), "
        f"{counts.get('busy host', 0)} speed changes not judged (other work on the host)"
    )
    if unreadable:  # a comparison that could not read every record is not a verdict
        print(
            f"membench compare: {unreadable} record files could not be read (listed above: "
            f"corrupt, not records, or non-finite metrics); exit {INCOMPLETE}",
            file=sys.stderr,
        )
        return INCOMPLETE
    return 1 if regressions(table) else 0


def budget_refusal(budget: float | None, device: str, card: float | None, cap: float) -> str | None:
    """Why capacity cannot search within budget (None: it can): above the GPU's memory, or
    on a CPU above the memory cap per cell (the search would end at the cap, not the budget)."""
    if budget is None:
        return None
    if card is not None and budget > card:
        return f"--budget {budget / 2**30:.3g} GiB is more than the GPU's {card / 2**30:.2f} GiB"
    if card is None and budget > cap:
        return (
            f"--budget {budget / 2**30:.3g} GiB is above the memory cap per cell "
            f"({cap / 2**30:.2f} GiB): give a smaller budget or a larger --memory-cap"
        )
    return None


def cmd_capacity(args: argparse.Namespace) -> int:
    from membench.asv_suite import capacity_regexes
    from membench.bench import asv_env, print_forecast, run_asv
    from membench.bench import console as progress_console
    from membench.capacity import budget_for
    from membench.capacity_run import forecast_searches, plan_searches, run_searches
    from membench.environment import (
        default_preset,
        detected_device,
        git_commit,
        gpu_info,
        machine_name,
    )

    preset = registry.preset(args.preset or default_preset()).name
    device = detected_device()
    total = float(gpu_info()["gpu_memory_bytes"]) if device == "cuda" else None
    if args.budget is None and total is None:
        return fail("give --budget on a CPU host (e.g. 2GiB)", "membench capacity")
    cap = getattr(args, "memory_cap", None) or memory_cap.default_cap()
    if why := budget_refusal(args.budget, device, total, cap):
        return fail(why, "membench capacity")
    budget = budget_for(device, args.budget or total)
    fraction = min(1.0, budget.bytes / total) if total else None
    args.batch = None
    sel = _selection(args, preset)
    runner.plan(sel["workloads"], sel["frameworks"], sel["strategies"], preset)  # checks names
    machine, commit = machine_name(), str(git_commit()["commit"])
    plans = [
        plan_searches(
            preset, w, sel["frameworks"], sel["strategies"], budget, machine, commit,
            args.max_batch or registry.preset(preset).capacity_max_batch, fraction,
        )
        for w in sel["workloads"]
    ]  # fmt: skip
    print_forecast(forecast_searches(plans, machine), "capacity probes")
    if args.estimate:
        return 0
    if why := dirty_results(plans[0].folder):
        return fail(why, "membench capacity")
    console.print(
        f"capacity within {budget.bytes / 2**30:.2f} GiB ({budget.note}); in {plans[0].folder}"
    )
    with _one_writer(args, plans[0].folder), _engine(args) as engine:
        for plan in plans:
            run_searches(
                plan, engine, progress_console.print, args.tolerance, args.first,
                not args.bisect, machine,
            )  # fmt: skip
    searched = {k: sel[k] for k in ("workloads", "frameworks", "strategies")}
    env = asv_env(preset, plans[0].store, searched)
    env["MEMBENCH_CAPACITY_FILE"] = str(plans[0].results_file)
    return run_asv(env, capacity_regexes(preset, searched))


def cmd_calibrate(args: argparse.Namespace) -> int:
    from membench.calibrate import run_calibration

    workloads = args.workload or list(registry.preset(registry.CALIBRATION_PRESET).sizes)
    frameworks = args.framework or [
        f for f in registry.FRAMEWORKS if registry.framework_installed(f)
    ]
    runner.plan(workloads, frameworks, [], registry.CALIBRATION_PRESET)  # checks names
    if why := dirty_results(args.results):
        return fail(why, "membench calibrate")
    from membench.environment import git_commit, machine_name

    store = paths.calibration_records(machine_name(), str(git_commit()["commit"]), args.results)
    with _one_writer(args, store):
        written = run_calibration(workloads, frameworks, args.results, args.fresh)
    for path in written:
        console.print(f"calibration: {path}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """List a plan's parts with their estimated GPU time, or run one part (resumable)."""
    import time

    from membench import plans

    parts = plans.plan(args.plan)
    if not args.part:
        t = Table(title=f"plan {args.plan}: one command per part, each under 9 minutes")
        for h in ["part", "estimated min", "what"]:
            t.add_column(h)
        t.add_row("setup", f"{plans.SETUP_SECONDS / 60:.1f}", "offline install, Jittor's core")
        total = plans.SETUP_SECONDS
        for part in parts:
            seconds = plans.estimate_seconds(part)
            total += seconds
            t.add_row(part.name, f"{seconds / 60:.1f}", part.description)
        t.add_row("total", f"{total / 60:.1f}", "estimated by the cost model in membench/plans.py")
        console.print(t)
        return 0
    part = plans.part(args.plan, args.part)
    started = time.monotonic()
    rc = 0
    skip = set(args.skip or [])
    for sel in part.cells:
        frameworks = [f for f in sel.frameworks if f not in skip]
        if not frameworks:
            continue
        # cells start while time is left for them and for asv to record the part
        reserve = plans.ASV_SECONDS_PER_CELL * 40 + 60
        ns = argparse.Namespace(
            workload=[sel.workload], framework=frameworks,
            strategy=list(sel.strategies), batch=list(sel.batch_sizes), preset=sel.preset,
            store=None, timeout=None, fresh=False, keep_failed=False,
            deadline=started + args.seconds - reserve,
        )  # fmt: skip
        rc = max(rc, cmd_bench(ns))
    for search in part.searches:
        frameworks = [f for f in search.frameworks if f not in skip]
        if not frameworks:
            continue
        ns = argparse.Namespace(
            workload=[search.workload], framework=frameworks,
            strategy=[search.strategy], preset=search.preset, budget=float(search.budget_bytes),
            max_batch=65536, tolerance=search.tolerance, first=search.first,
        )  # fmt: skip
        rc = max(rc, cmd_capacity(ns))
    console.print(f"part {part.name}: {time.monotonic() - started:.0f} s")
    return rc


def cmd_pack(args: argparse.Namespace) -> int:
    from membench.archive import pack
    from membench.environment import machine_name

    machine = args.machine or machine_name()
    if not paths.machine_results(machine, own=True):
        machines = ", ".join(paths.result_machines()) or "none"
        return fail(f"no results for machine {machine!r} (machines: {machines})", "membench pack")
    names = pack(args.archive, machine)
    size = args.archive.stat().st_size / 2**20
    console.print(f"{args.archive} ({size:.2f} MiB): {', '.join(names)}")
    return 0


def cmd_unpack(args: argparse.Namespace) -> int:
    from membench.archive import ArchiveError, unpack

    for archive in args.archives:
        try:
            machine, folders = unpack(archive)
        except ArchiveError as exc:
            return fail(str(exc), "membench unpack")
        console.print(f"{archive}: {machine} -> results/ ({', '.join(folders)})")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """The store's good records, then each file that is not one with why; exit 1 if any
    file is bad or none is good."""
    store = RecordStore(args.store)
    records, bad = store.scan()
    if records:
        print_table(records, f"records in {store.root}")
    else:
        console.print(f"no records in {store.root}")
    for exc in bad:
        console.print(f"[red]{exc}[/red]", soft_wrap=True)
    return 1 if bad or not records else 0


def cmd_report(args: argparse.Namespace) -> int:
    if not (args.docs or args.out):
        return fail("report: give --out DIR, --docs or both")
    if args.docs:
        from analysis.results_page import write_pages

        for page in write_pages(args.results):
            console.print(f"results page: {page}")
    if args.out:
        from analysis.report import write_report

        problems: list[str] = []
        console.print(f"report: {write_report(args.results, args.out, problems)}")
        for problem in problems:  # also on the page; here so that a script sees them
            print(f"membench report: {problem}", file=sys.stderr)
        if problems:
            print(f"membench report: {len(problems)} files skipped or partly read", file=sys.stderr)
    return 0


def _add_engine(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine", choices=ENGINES, default="local",
        help="local: cells in sequence on this machine (default); ray: over a Ray cluster",
    )  # fmt: skip
    p.add_argument(
        "--address",
        help="with --engine ray: the cluster (auto, or HOST:PORT of its head); "
        "default: a one-node Ray started on this machine",
    )
    p.add_argument(
        "--cells-per-node", type=positive_int, default=1,
        help="with --engine ray on CPU nodes: cells sharing one node (default 1: a whole "
        "node per cell; records say when it was shared)",
    )  # fmt: skip


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("-w", "--workload", type=argtypes.names, action="extend", help=NAMES_ALL)
    p.add_argument("-f", "--framework", type=argtypes.names, action="extend", help=NAMES_INSTALLED)
    p.add_argument("-s", "--strategy", type=argtypes.names, action="extend", help=NAMES_ALL)
    p.add_argument(
        "-b", "--batch", type=argtypes.batch_sizes, help="batch sizes (default: the preset's grid)"
    )
    p.add_argument(
        "-p", "--preset", type=argtypes.name,
        help="smoke, cpu, gpu, cpu-eval, gpu-eval (default: from the device)",
    )  # fmt: skip
    p.add_argument(
        "--world-size", type=positive_int,
        help="ranks of each sharding strategy's cell (default: the preset's; others run on one)",
    )  # fmt: skip
    p.add_argument("--store", type=argtypes.writable_dir, help="record directory")
    p.add_argument(
        "--timeout", type=positive_seconds, help="seconds per cell (default: the preset's)"
    )
    p.add_argument("--fresh", action="store_true", help="re-measure cells already stored")
    p.add_argument(
        "--timeline", action="store_true",
        help="sample each cell's memory every "
        f"{timeline.INTERVAL_SECONDS * 1000:.0f} ms from outside its worker, phases marked, into "
        "the store's timelines/ (the sampler takes 1-4%% of one core here: off by default)",
    )  # fmt: skip
    p.add_argument(
        "--trace", action="store_true",
        help="after each measured cell, a worker of its own runs a step under the framework's "
        "own memory view (torch's profiler memory timeline on CPU, its CUDA snapshot on GPU; "
        "JAX's device memory profile; Jittor's peak memory report), into the store's traces/ "
        "(local engine)",
    )  # fmt: skip
    p.add_argument(
        "--keep-failed", action="store_true", help="do not retry stored timeout/error cells"
    )
    p.add_argument(
        "--estimate", action="store_true", help="print the plan's time estimate and exit"
    )
    _add_writer(p)
    _add_engine(p)


def _add_writer(p: argparse.ArgumentParser) -> None:
    """Options of a command that measures into a store (one writer at a time)."""
    p.add_argument(
        "--wait", action="store_true",
        help="if another run holds the store, wait for it (default: refuse at once)",
    )  # fmt: skip
    p.add_argument(
        "--memory-cap", type=argtypes.memory_cap_bytes,
        help=f"resident memory a cell's processes may hold, e.g. 8GiB (default: "
        f"{memory_cap.DEFAULT_SHARE * 100:.0f}%% of the memory available at the start)",
    )  # fmt: skip


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr and exit 2, before any work."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def cmd_selfcheck(args: argparse.Namespace) -> int:
    from membench import selfcheck as sc

    frameworks = args.framework or [
        f for f in sc.REFERENCE_LOOPS if registry.framework_installed(f)
    ]
    strategies = args.strategy or list(registry.SELFCHECK_STRATEGIES)
    for name in strategies:
        registry.strategy(name)
    for name in frameworks:
        if name not in sc.REFERENCE_LOOPS:
            registry.framework(name)  # an unknown name lists the valid ones
            return fail(f"{name} has no reference loop (models/reference/)")
    provenance, saved = {}, None
    if args.json or args.save:  # read before the run: the saved file's name and its content
        from membench.environment import cpu_model, git_commit, machine_name

        provenance = {"machine": machine_name(), "cpu": cpu_model(), "git": git_commit()}
    if args.save:
        commit = str(provenance["git"].get("commit") or "")
        saved = paths.selfcheck_file(
            provenance["machine"], sc.WORKLOAD, args.size, args.batch, commit
        )
        if why := dirty_results(saved):
            return fail(why, "membench selfcheck")
    print(
        f"selfcheck: {sc.WORKLOAD} {args.size}x{args.size}, batch {args.batch}; suite cell "
        f"then reference loop, each a fresh process; samples/s and MiB\n{sc.HEADER}",
        flush=True,
    )
    rows, overhead = sc.selfcheck(
        frameworks, strategies, args.size, args.batch,
        on_row=lambda row: print(sc.format_row(row), flush=True),
    )  # fmt: skip
    for framework, result in overhead.items():
        print(sc.format_overhead(framework, result))
    if args.json or saved:
        report = sc.as_json(rows, overhead, args.size, args.batch, provenance)
        for path in filter(None, [args.json, saved]):
            write_json_atomic(path, report)
            print(f"written: {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="membench", description="Memory and speed of deep-learning frameworks.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("list", help="workloads, strategies, presets, frameworks")
    p.add_argument(
        "--matrix", action="store_true", help="framework x strategy support, from the backends"
    )
    p.add_argument("--markdown", action="store_true", help="with --matrix: as a Markdown table")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("run", help="measure cells and print their records")
    _add_selection(p)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser(
        "bench", help="the main job: measure, record with asv, search capacities, summarise"
    )
    _add_selection(p)
    p.add_argument(
        "--no-capacity", action="store_true",
        help="skip the capacity searches the preset declares (its decision tables)",
    )  # fmt: skip
    p.add_argument(
        "--allow-busy", action="store_true",
        help="record cells still measured on a busy host after their second try, marked "
        "(default: kept out of asv and of the tables' speed figures)",
    )  # fmt: skip
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser(
        "versions",
        help="measure under every framework version of requirements/versions.txt (asv envs)",
    )
    p.add_argument("-w", "--workload", type=argtypes.names, action="extend", help=NAMES_ALL)
    p.add_argument("-s", "--strategy", type=argtypes.names, action="extend", help=NAMES_ALL)
    p.add_argument(
        "-b", "--batch", type=argtypes.batch_sizes, help="batch sizes (default: the preset's grid)"
    )
    p.add_argument(
        "-p", "--preset", type=argtypes.name, help="smoke, cpu or gpu (default: from the device)"
    )
    p.add_argument(
        "--only",
        type=argtypes.names,
        help="frameworks or versions, e.g. jax or jax-0.7.1 (default: all)",
    )
    _add_engine(p)
    p.set_defaults(func=cmd_versions)
    p = sub.add_parser(
        "capacity", help="largest batch within a memory budget, by bisection in fresh processes"
    )
    p.add_argument("-w", "--workload", type=argtypes.names, action="extend", help=NAMES_ALL)
    p.add_argument("-f", "--framework", type=argtypes.names, action="extend", help=NAMES_INSTALLED)
    p.add_argument("-s", "--strategy", type=argtypes.names, action="extend", help=NAMES_ALL)
    p.add_argument(
        "-p",
        "--preset",
        type=argtypes.name,
        help="input sizes from this preset (default: from the device)",
    )
    p.add_argument(
        "--budget", type=argtypes.byte_size,
        help="memory budget, e.g. 2GiB (default on a GPU: the card; required on a CPU host)",
    )  # fmt: skip
    p.add_argument(
        "--max-batch", type=batch_size,
        help=f"largest batch tried (default: the preset's, e.g. cpu-quick's 64; most {MAX_BATCH})",
    )  # fmt: skip
    p.add_argument("--first", type=batch_size, default=1, help="first batch tried (default 1)")
    p.add_argument(
        "--tolerance", type=argtypes.fraction(low_inclusive=True), default=0.0,
        help="stop bisecting once the smallest non-fit is within this fraction of the largest "
        "fit (default 0: exact)",
    )  # fmt: skip
    p.add_argument(
        "--bisect", action="store_true",
        help="plain doubling and bisection from --first, not guided by the memory model",
    )  # fmt: skip
    p.add_argument(
        "--estimate", action="store_true", help="print the probes' time estimate and exit"
    )
    _add_writer(p)
    _add_engine(p)
    p.set_defaults(func=cmd_capacity)
    p = sub.add_parser(
        "calibrate",
        help="measure the memory model's per-framework constants (calibration cells only)",
    )
    p.add_argument("-w", "--workload", type=argtypes.names, action="extend", help=NAMES_ALL)
    p.add_argument("-f", "--framework", type=argtypes.names, action="extend", help=NAMES_INSTALLED)
    p.add_argument(
        "--results", type=argtypes.writable_dir, default=paths.RESULTS,
        help="results folder to write calibration/ into (default: this checkout's)",
    )  # fmt: skip
    p.add_argument("--fresh", action="store_true", help="re-measure cells already stored")
    _add_writer(p)
    p.set_defaults(func=cmd_calibrate)
    p = sub.add_parser(
        "plan", help="a GPU plan's parts and estimated times, or run one part (resumable)"
    )
    p.add_argument("plan", help="gpu-quick")
    p.add_argument("part", nargs="?", help="the part to run (default: list the parts)")
    p.add_argument(
        "--seconds", type=positive_seconds, default=540,
        help="no cell starts late for this (default 540)",
    )  # fmt: skip
    p.add_argument(
        "--skip", type=argtypes.names, help="frameworks left out (e.g. one that cannot build)"
    )
    p.set_defaults(func=cmd_plan)
    p = sub.add_parser("pack", help="a machine's results (records, capacity, asv) as one archive")
    p.add_argument("archive", type=argtypes.writable_file, help="the .tar.gz to write")
    p.add_argument("--machine", type=argtypes.name, help="default: this machine's name")
    p.set_defaults(func=cmd_pack)
    p = sub.add_parser("unpack", help="put archives from `membench pack` into results/")
    p.add_argument("archives", type=Path, nargs="+")
    p.set_defaults(func=cmd_unpack)
    p = sub.add_parser(
        "compare",
        help="change per benchmark between two versions, environments or commits; "
        "exit 1 on a regression, 3 if record files could not be read",
    )
    p.add_argument("base", help="environment (default, jax-0.10.2), version (jax-0.7.1) or commit")
    p.add_argument("new", help="the same kinds as base")
    p.add_argument("-w", "--workload", type=argtypes.names, action="extend", help=NAMES_ALL)
    p.add_argument("-s", "--strategy", type=argtypes.names, action="extend", help=NAMES_ALL)
    p.add_argument("-b", "--batch", type=argtypes.batch_sizes, help="batch sizes (default: all)")
    p.add_argument(
        "--metric",
        type=argtypes.metric_names,
        help="metrics (default: memory, throughput, XLA temp)",
    )
    p.add_argument(
        "--threshold", type=argtypes.fraction(low_inclusive=False), default=0.05,
        help="smallest relative change that counts, raised to the measured spread (default 0.05)",
    )  # fmt: skip
    p.add_argument("--all", action="store_true", help="also list unchanged benchmarks")
    p.add_argument(
        "--results", type=argtypes.results_dir, default=paths.RESULTS, help="results folder"
    )
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("report", help="HTML page, Markdown tables, plots and data exports")
    where = p.add_argument_group("where (one or both)")
    where.add_argument("--out", type=argtypes.writable_dir, help="directory to write the report to")
    where.add_argument(
        "--docs", action="store_true",
        help="write the results pages, one per machine, to docs/results/ (membench.paths)",
    )  # fmt: skip
    p.add_argument(
        "--results", type=argtypes.results_dir, default=paths.RESULTS, help="results folder"
    )
    p.set_defaults(func=cmd_report)
    p = sub.add_parser(
        "selfcheck",
        help="the suite's ResNet-50 cells beside each framework's plain loop, and the probes' cost",
    )
    p.add_argument("-f", "--framework", type=argtypes.names, action="extend", help=NAMES_INSTALLED)
    p.add_argument(
        "-s",
        "--strategy",
        type=argtypes.names,
        help="comma-separated (default: baseline,infer,accumulate-4)",
    )
    p.add_argument("--size", type=positive_int, default=64, help="image size (default 64)")
    p.add_argument("--batch", type=positive_int, default=4, help="batch size (default 4)")
    p.add_argument(
        "--json", type=argtypes.writable_file, help="also write the results to this file"
    )
    p.add_argument(
        "--save", action="store_true",
        help="also keep the results under results/selfcheck/ (committed code only), where the "
        "results page reads them",
    )  # fmt: skip
    p.set_defaults(func=cmd_selfcheck)
    p = sub.add_parser("show", help="print the records of a store")
    p.add_argument("store", type=argtypes.store_dir)
    p.set_defaults(func=cmd_show)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # a refused argument (2) or --help (0)
        return int(exc.code or 0)
    engine = getattr(args, "engine", None)
    if engine == "local" and (args.address or args.cells_per_node != 1):
        return fail("--address and --cells-per-node need --engine ray")
    try:
        return args.func(args)
    except (registry.UnknownNameError, VersionsFileError, BadInput, StoreLockedError) as exc:
        return fail(str(exc))
    except RecordNotSavedError as exc:  # nothing measured is lost: the record goes to stdout
        print(json.dumps(exc.record.to_dict(), sort_keys=True))
        print(f"membench: error: {exc}; the record is printed above", file=sys.stderr)
        return 1
    except StoreFullError as exc:
        print(f"membench: error: {exc}", file=sys.stderr)
        return 1
    except (ImportError, ConnectionError, EngineError) as exc:
        if engine != "ray":
            raise
        return fail(f"engine ray: {exc}")
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP turned into one
        signum = exc.signum if isinstance(exc, runner.Terminated) else None
        signum = signum or (runner.received[-1] if runner.received else None)
        return 128 + signum if signum else 130
