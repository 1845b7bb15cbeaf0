"""membench capacity: the largest batch within a memory budget, per framework x strategy,
each probe a fresh worker (membench.capacity.search searches, membench.capacity.run runs them)."""

from __future__ import annotations

import argparse

from membench import argtypes, registry
from membench.argtypes import MAX_BATCH, batch_size
from membench.cells import planning
from membench.commands.parsing import console, fail
from membench.commands.run_options import RunOptions, add_engine, add_estimate, add_writer
from membench.commands.selection import Selection, add_names, preset_names, preset_of
from membench.commands.store_guard import connected_engine, dirty_results, one_writer
from membench.instruments import memory_cap


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "capacity",
        help="largest batch within a memory budget, each probe a fresh process, the search "
        "guided by the memory model (plain doubling and bisection with --bisect)",
    )
    add_names(p, "workload", "framework", "strategy")
    p.add_argument(
        "-p",
        "--preset",
        type=argtypes.name,
        help=f"input sizes from this preset: {preset_names()} (default: from the device)",
    )
    p.add_argument(
        "--budget", type=argtypes.byte_size,
        help="memory budget, e.g. 2GiB (default: the preset's budgets per workload, e.g. "
        "cpu-capacity's two, gpu-quick's 24 GiB; else the GPU's memory, or required on a CPU "
        "host); asv records the preset's budgets only, the results keep any",
    )  # fmt: skip
    p.add_argument(
        "--repeats", type=argtypes.positive_int, default=None,
        help="measurements of the answer and of the next batch; the answer fits only if "
        "every one does (default: the preset's, e.g. cpu-capacity's 3)",
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
        "--whole-card", action="store_true",
        help="on a GPU: the budget is the process's whole figure (NVML's), as a card's memory "
        "is; each framework's limit is set below it by the process overhead the GPU records "
        "measured (default: the budget is the framework's allocator limit)",
    )  # fmt: skip
    p.add_argument(
        "--side-by-side", type=argtypes.positive_int, default=1,
        help="searches run at once on this machine, each probe within its own budget (a "
        "GPU's memory shared out by the frameworks' limits; on a host, the memory cap): "
        "their peaks count, their speed does not (default 1)",
    )  # fmt: skip
    add_estimate(p, "print the probes' time estimate and exit")
    add_writer(p)
    add_engine(p)
    p.set_defaults(func=main)


def budget_refusal(
    budget: float | None, device: str, card: float | None, cap: float, side_by_side: int = 1
) -> str | None:
    """Why capacity cannot search within budget (None: it can): above the GPU's memory (side
    by side: their budgets together), or on a CPU above the memory cap per cell (the search
    would end at the cap, not the budget)."""
    if budget is None:
        return None
    if card is not None and budget * side_by_side > card:
        together = f"{side_by_side} side by side need " if side_by_side > 1 else "the budget, "
        return (
            f"{together}{budget * side_by_side / 2**30:.3g} GiB, more than the GPU's "
            f"{card / 2**30:.2f} GiB: give a smaller --budget"
            + (" or fewer --side-by-side" if side_by_side > 1 else "")
        )
    if card is None and budget > cap:
        return (
            f"--budget {budget / 2**30:.3g} GiB is above the memory cap per cell "
            f"({cap / 2**30:.2f} GiB): give a smaller budget or a larger --memory-cap"
        )
    return None


MAX_REPEATS = 10  # more measurements of one batch than this say nothing new about its spread


def main(args: argparse.Namespace) -> int:
    if args.repeats is not None and args.repeats > MAX_REPEATS:
        return fail(f"--repeats {args.repeats}: at most {MAX_REPEATS}", "membench capacity")
    preset = preset_of(args)
    if args.side_by_side > 1 and args.engine != "local":
        why = "--side-by-side runs searches at once on this machine; a cluster: --cells-per-node"
        return fail(why, "membench capacity")
    sel = Selection.filled(preset, args.workload, args.framework, args.strategy)
    return search(
        preset, sel, args.budget, RunOptions.of(args), args.max_batch, args.tolerance, args.first,
        not args.bisect, args.estimate, args.repeats, args.side_by_side,
        whole_card=args.whole_card,
    )  # fmt: skip


def search(
    preset: str,
    sel: Selection,
    budget_bytes: float | None,
    opts: RunOptions,
    max_batch: int | None = None,
    tolerance: float = 0.0,
    first: int = 1,
    guide: bool = True,
    estimate: bool = False,
    repeats: int | None = None,
    side_by_side: int = 1,
    settled: frozenset[tuple[str, str, str]] = frozenset(),
    whole_card: bool = False,
) -> int:
    """Every selected search within the budget (where none is given: the preset's budgets
    per workload, else a GPU's own memory), each budget's results in one capacity folder,
    then recorded with asv; side_by_side of them at once; none of those settled (workload,
    framework, strategy) elsewhere."""
    from membench.capacity.run import forecast_searches, plan_searches, run_searches
    from membench.capacity.search_steps import budget_for
    from membench.cells.progress import console as progress_console
    from membench.cells.progress import print_forecast
    from membench.environment import detected_device, git_commit, gpu_info, machine_name

    device = detected_device()
    total = float(gpu_info()["gpu_memory_bytes"]) if device == "cuda" else None
    if whole_card and device != "cuda":
        why = "--whole-card: a card's whole budget is NVML's figure for the process, a GPU's"
        return fail(why, "membench capacity")
    given = registry.preset(preset).capacity_budgets
    budgets = {w: (budget_bytes,) if budget_bytes else given.get(w, ()) for w in sel.workloads}
    if total is None and not all(budgets.values()):
        bare = ", ".join(w for w, b in budgets.items() if not b)
        why = f"give --budget on a CPU host (e.g. 2GiB): preset {preset} has none for {bare}"
        return fail(why, "membench capacity")
    if side_by_side > 1 and not all(budgets.values()):
        bare = ", ".join(w for w, b in budgets.items() if not b)
        why = f"--side-by-side shares the device out: give --budget ({bare} has none)"
        return fail(why, "membench capacity")
    cap = opts.memory_cap or memory_cap.default_cap() / side_by_side
    for size in {b for found in budgets.values() for b in found}:
        if why := budget_refusal(size, device, total, cap, side_by_side):
            return fail(why, "membench capacity")
    planning.cells_for(sel.workloads, sel.frameworks, sel.strategies, preset)  # checks the names
    machine, commit = machine_name(), str(git_commit()["commit"])
    largest = max_batch or registry.preset(preset).capacity_max_batch
    if first > largest:  # the search would start above its own end
        bound = "--max-batch" if max_batch else f"preset {preset}'s largest; give --max-batch"
        why = f"--first {first} is above the largest batch tried, {largest} ({bound})"
        return fail(why, "membench capacity")
    plans = []
    for w in sel.workloads:
        overheads: tuple[tuple[str, float, str], ...] = ()
        if whole_card:
            overheads, missing = card_overheads(w, sel.frameworks)
            if missing:
                return fail(
                    f"--whole-card: no GPU record measures {', '.join(missing)}'s process "
                    "overhead (NVML's figure beyond its allocator): search within the "
                    "allocator limit first (without --whole-card)", "membench capacity",
                )  # fmt: skip
        for size in budgets[w] or (total,):
            budget = budget_for(device, size, overheads)
            plans.append(
                plan_searches(
                    preset, w, sel.frameworks, sel.strategies, budget, machine, commit,
                    largest, round(total) if total else None, repeats=repeats, settled=settled,
                )
            )  # fmt: skip
    said = set()
    for plan in plans:  # the budget as understood, and what is not searched, before any probe
        console.print(f"{plan.workload}: within {plan.budget.bytes / 2**30:.2f} GiB")
        for framework, strategy, why in plan.left_out:
            if (plan.workload, framework, strategy) not in said:  # once, not per budget
                said.add((plan.workload, framework, strategy))
                console.print(f"  {framework} {strategy}: left out by preset {preset}: {why}")
    print_forecast(forecast_searches(plans, machine), "capacity probes")
    if side_by_side > 1:
        console.print(f"{side_by_side} searches at a time: about 1/{side_by_side} of that")
    if estimate:
        return 0
    for folder in dict.fromkeys(plan.folder for plan in plans):
        if why := dirty_results(folder):
            return fail(why, "membench capacity")
    status = 0
    for folder in dict.fromkeys(plan.folder for plan in plans):  # each budget's folder
        mine = [plan for plan in plans if plan.folder == folder]
        budget = mine[0].budget
        console.print(
            f"capacity within {budget.bytes / 2**30:.2f} GiB ({budget.note}); in {folder}"
        )
        with one_writer(opts, folder) as run_opts, connected_engine(opts) as engine:
            for plan in mine:
                run_searches(
                    plan, engine, progress_console.print, tolerance, first, guide, machine,
                    run_opts.worker(), side_by_side,
                )  # fmt: skip
        status = status or record_with_asv(preset, mine, sel.names())
    return status


def card_overheads(
    workload: str, frameworks: list[str]
) -> tuple[tuple[tuple[str, float, str], ...], list[str]]:
    """Each framework's process overhead on this GPU as the committed GPU records measured it
    (its workload's on this device kind where they have it: membench.gpu_predict.overhead),
    the highest plus a margin, and the frameworks none measured."""
    from membench.environment import gpu_info
    from membench.gpu_predict.overhead import measured_overheads, process_overhead

    kind = str((gpu_info() or {}).get("device_name", ""))
    measured = measured_overheads()
    found, missing = [], []
    for framework in frameworks:
        one = process_overhead(measured, workload, kind, framework=framework, highest=True)
        if one is None:
            missing.append(framework)
        else:  # the highest measured and a margin: a framework that preallocates its whole
            # limit (JAX) holds limit + overhead at every batch, so a median would leave its
            # fit to the overhead's own noise
            overhead, how = one
            found.append((framework, overhead + OVERHEAD_MARGIN, f"{how} + {MARGIN_MIB} MiB"))
    return tuple(found), missing


MARGIN_MIB = 64
OVERHEAD_MARGIN = MARGIN_MIB * 2**20  # above the highest overhead measured (H200: 632-638 MiB)


def record_with_asv(preset: str, plans: list, names: dict[str, list]) -> int:
    """asv's record of one budget's searches (the plans of one capacity folder), where the
    preset declares that budget for a searched workload: asv's exit status, 0 where there is
    nothing to record (only left-out searches, or a budget the preset does not declare)."""
    from membench.publish.asv_run import asv_env, run_asv
    from membench.publish.asv_suite import capacity_regexes

    if not any(plan.combos for plan in plans):  # only left-out results: no figure to record
        return 0
    first = plans[0]
    regexes = capacity_regexes(preset, names, first.budget.bytes)
    if not regexes:
        console.print(
            f"asv: nothing to record (asv keeps preset {preset}'s declared budgets only; "
            f"this search stays in {first.folder})"
        )
        return 0
    env = asv_env(preset, first.store, names)
    # asv runs the suite in processes of its own, which know of this run only what their
    # environment says: the file just written, so that they record these searches and not the
    # newest file of the commit, which another run at this budget may have written since
    env["MEMBENCH_CAPACITY_FILE"] = str(first.results_file)
    return run_asv(env, regexes)
