"""membench gpu-predict: a cell's GPU memory predicted on a host without a GPU, by its
framework's own machinery (membench.gpu_predict); every GPU record's cell predicted beside it
(--records); a card's largest batches from predictions alone (--table)."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from membench import argtypes, file_rules, paths, registry
from membench.argtypes import MAX_BATCH, batch_size
from membench.commands.parsing import console, fail
from membench.commands.store_guard import dirty_results
from membench.gpu_predict.run import STANDARD_PRESET

# The decision table's rows on a card: the GPU plans' training strategies, the standard sizes
TABLE_PRESET = STANDARD_PRESET
TABLE_STRATEGIES = ("baseline", "amp-bf16", "checkpoint", "amp-bf16-checkpoint", "accumulate-4")
TABLE_WORKLOADS = ("resnet50", "unet3d", "transformer")
TABLE_FRAMEWORKS = ("torch", "jax", "jittor")  # Jittor's rows say why it has none


def add_parser(sub: argparse._SubParsersAction) -> None:
    from membench.gpu_predict.cards import CARDS, TABLE_CARDS

    p = sub.add_parser(
        "gpu-predict",
        help="a cell's GPU memory predicted without a GPU (torch: fake tensors and CUDA's "
        "allocator replayed; JAX: XLA compiled for the card); --records: every GPU record's "
        "cell; --table: a card's largest batches",
    )
    p.add_argument("-w", "--workload", type=argtypes.name, help="one workload")
    p.add_argument("-f", "--framework", type=argtypes.name, help="one framework")
    p.add_argument("-s", "--strategy", type=argtypes.name, help="one strategy")
    p.add_argument("-b", "--batch", type=batch_size, help="the batch size")
    p.add_argument(
        "-p", "--preset", type=argtypes.name, default=TABLE_PRESET,
        help=f"input sizes from this preset (default {TABLE_PRESET}: the standard sizes)",
    )  # fmt: skip
    p.add_argument(
        "--card", type=argtypes.names,
        help=f"of {', '.join(CARDS)} (default: h200; --table: every card of the tables, "
        f"{', '.join(TABLE_CARDS)})",
    )  # fmt: skip
    p.add_argument(
        "--limit", type=argtypes.byte_size,
        help="the allocator's limit (a capacity budget's), e.g. 24GiB (default: none)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--save", action="store_true",
        help="keep the prediction in results/predictions/ (committed code only)",
    )  # fmt: skip
    p.add_argument(
        "--records", action="store_true",
        help="predict the cell of every GPU record of the card (kept in results/predictions/)",
    )  # fmt: skip
    p.add_argument(
        "--table", action="store_true",
        help="the card's largest batch per workload, framework and strategy, from predictions "
        "(kept in results/predictions/<card>/; resumes)",
    )  # fmt: skip
    p.add_argument(
        "--budget", type=argtypes.byte_size,
        help="--table: within this capacity budget (e.g. 24GiB, as the GPU decision searches), "
        "not the whole card",
    )  # fmt: skip
    p.add_argument(
        "--max-batch", type=batch_size, default=4096,
        help=f"--table: the largest batch tried (default 4096; most {MAX_BATCH})",
    )  # fmt: skip
    p.add_argument(
        "--jobs", type=argtypes.positive_int, default=1,
        help="--table: rows predicted at once (default 1; each JAX compile is a process of "
        "its own, about 1.5 GiB and 1.3 cores)",
    )  # fmt: skip
    p.add_argument(
        "--describe-card", action="store_true",
        help="on a GPU machine: the card as NVML, torch and XLA read it, held against its "
        "description here (kept in results/devices/<machine>/card.json)",
    )  # fmt: skip
    p.add_argument("--results", type=argtypes.results_dir, default=paths.RESULTS)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from membench.gpu_predict.cards import TABLE_CARDS, card

    if args.describe_card:
        return describe_card(args.results)
    try:
        names = args.card or (list(TABLE_CARDS) if args.table else ["h200"])
        cards = [card(n) for n in names]
        for kind, value in (
            ("workload", args.workload), ("framework", args.framework),
            ("strategy", args.strategy), ("preset", args.preset),
        ):  # fmt: skip
            if value is not None:
                getattr(registry, kind)(value)
    except ValueError as exc:  # UnknownNameError lists the valid names
        return fail(str(exc), "membench gpu-predict")
    writes = args.save or args.records or args.table
    if writes and (why := dirty_results(args.results)):
        return fail(why, "membench gpu-predict")
    if len(cards) > 1 and not args.table:
        return fail("one --card, except with --table", "membench gpu-predict")
    if args.jobs != 1 and not args.table:
        return fail("--jobs is for --table's rows", "membench gpu-predict")
    if args.table and args.preset != TABLE_PRESET:
        return fail(
            f"--table answers at the standard sizes ({TABLE_PRESET}), the tables' only one",
            "membench gpu-predict",
        )
    c = cards[0]
    if args.records:
        return predict_records(c, args.results, args.framework)
    if args.table:
        return card_table(cards, args)
    missing = [f"-{k[0]}" for k in ("workload", "framework", "strategy", "batch")
               if getattr(args, k) is None]  # fmt: skip
    if missing:
        return fail(
            f"a cell needs {', '.join(missing)} (or --records, or --table)", "membench gpu-predict"
        )
    return predict_one(c, args)


def describe_card(results: Path) -> int:
    """This machine's GPU as its frameworks read it, kept beside its records, and where the
    description the predictions use differs from it."""
    from membench.environment import detected_device, gpu_info, machine_name
    from membench.gpu_predict import device
    from membench.gpu_predict.cards import card_of_device

    if detected_device() != "cuda":
        why = "--describe-card reads the GPU it describes: run it on the GPU machine"
        return fail(why, "membench gpu-predict")
    name = str((gpu_info() or {}).get("device_name", ""))
    read = device.read_card()
    path = paths.device_description(machine_name(), results)
    device.save(read, path)
    for framework in device.READERS:
        answer = read[framework]
        if answer.get("status") != "ok":
            console.print(f"{framework}: {answer.get('status')}: {answer.get('reason', '')}")
    known = card_of_device(name)
    if known is None:
        console.print(f"{name}: no card of that name is described here (cards.py); kept in {path}")
        return 0
    found = device.differences(known, read)
    for line in found or [f"{known.name}: its description agrees with the card"]:
        console.print(line, soft_wrap=True)
    console.print(f"kept in {path}")
    return 0


def cell_of(args: argparse.Namespace) -> dict[str, object]:
    return {
        "workload": args.workload, "framework": args.framework, "strategy": args.strategy,
        "batch_size": args.batch, "preset": args.preset,
    }  # fmt: skip


def predict_one(c, args: argparse.Namespace) -> int:
    from membench.gpu_predict.overhead import measured_overheads
    from membench.gpu_predict.run import predict, save

    limit = int(args.limit) if args.limit else None
    made = predict(cell_of(args), c, limit)
    process, how = process_bytes(made, c, measured_overheads(args.results))
    if args.save and made.status in ("ok", "unsupported"):  # an error is not kept
        save(made, paths.prediction_file(c.name, made.key, args.results))
    if args.json:
        out = {
            "status": made.status, "reason": made.reason,
            "allocated_bytes": made.allocated_bytes, "reserved_bytes": made.reserved_bytes,
            "process_bytes": process, "process_overhead": how, "seconds": made.seconds,
            "method": made.method, "card": c.name, "framework_version": made.framework_version,
        }  # fmt: skip
        print(json.dumps(out, sort_keys=True))
    elif made.status != "ok":
        console.print(f"{made.status}: {made.reason}", soft_wrap=True)
    else:
        gib = lambda b: "-" if b is None else f"{b / 2**30:.2f} GiB"  # noqa: E731
        console.print(
            f"{made.cell['workload']} {made.cell['framework']} {made.cell['strategy']} at batch "
            f"{made.cell['batch_size']} on {c.description} (predicted, {made.seconds:.0f} s): "
            f"allocated {gib(made.allocated_bytes)}, reserved {gib(made.reserved_bytes)}, "
            f"process {gib(process)}" + (f" ({how})" if how else ""),
            soft_wrap=True,
        )
        console.print(f"method: {made.method}", soft_wrap=True)
    return 0 if made.status == "ok" else 1


def process_bytes(made, c, overheads) -> tuple[float | None, str]:
    """The whole process on the card: torch's reserve plus the overhead the GPU records
    measured (the card's own device kind where it has records, else named)."""
    from membench.gpu_predict.overhead import process_overhead

    if made.status != "ok" or made.cell["framework"] != "torch":
        if made.status == "ok":
            return None, "not predicted: XLA's allocator grows its pool by regions"
        return None, ""
    found = process_overhead(overheads, made.cell["workload"], c.device_kind)
    if found is None:
        return None, "no GPU record measures the process overhead"
    overhead, how = found
    return made.reserved_bytes + overhead, f"overhead {overhead / 2**20:.0f} MiB: {how}"


def predict_records(c, results: Path, framework: str | None = None) -> int:
    """Every GPU record of the card's device kind (cells and capacity probes) predicted, each
    kept beside the records; a prediction the same commit made is not made again, and one made
    before its cell had any record (--save) is kept as it was, its records attached."""
    from membench.environment import git_commit
    from membench.gpu_predict.records import gpu_record_cells
    from membench.gpu_predict.run import load, predict, prediction_key, save

    commit = git_commit().get("commit")
    todo = [t for t in gpu_record_cells(results, c.device_kind)
            if framework in (None, t[0]["framework"])]  # fmt: skip
    if not todo:
        console.print(f"no GPU record of a {c.device_kind} under {results}")
        return 0
    console.print(f"{len(todo)} cells of {c.device_kind} records to predict")
    failed = 0
    for i, (cell, limit, sources) in enumerate(todo, 1):
        key = prediction_key(cell, limit)
        path = paths.prediction_file(c.name, key, results)
        if path.exists():
            old = load(path)
            if old.ahead or (
                not old.records and old.status == "ok"
                and old.predicted_at < _first_measured(results, sources)
            ):  # fmt: skip
                # made before its cell's first GPU record: held to the records, never remade
                old.records, old.ahead = sources, True
                save(old, path)
                continue
            if old.predicted_by.get("commit") == commit:
                continue
        made = predict(cell, c, limit)
        made.records = sources
        save(made, path)
        failed += made.status == "error"
        console.print(f"[{i}/{len(todo)}] {key}: {made.status} {made.reason[:120]}")
    return 1 if failed else 0


def _first_measured(results: Path, sources: list[str]) -> str:
    """When the first of these GPU records was measured (ISO time, as predicted_at)."""
    from membench.records import read_record

    return min(read_record(results / source).started_at for source in sources)


def card_table(cards: list, args: argparse.Namespace) -> int:
    """Each workload x framework x strategy's largest batch on each card, from predictions
    (torch: one predictor process serves every card; JAX: compiles per card); --jobs rows at
    once, each kept as it ends."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from membench.environment import git_commit
    from membench.gpu_predict.overhead import measured_overheads
    from membench.gpu_predict.run import stop_predictors
    from membench.records import write_json_atomic

    files = {c.name: paths.card_tables_file(c.name, args.budget, args.results) for c in cards}
    done = {n: file_rules.load_json(p) if p.exists() else [] for n, p in files.items()}
    commit = git_commit().get("commit", "")
    rows = [
        ((w, f, s), todo)
        for w in ([args.workload] if args.workload else TABLE_WORKLOADS)
        for f in ([args.framework] if args.framework else TABLE_FRAMEWORKS)
        for s in ([args.strategy] if args.strategy else TABLE_STRATEGIES)
        if (todo := [c for c in cards if (w, f, s) not in _keys(done[c.name])])
    ]
    if rows:
        console.print(f"{len(rows)} rows to predict, {args.jobs} at a time")
    failed = 0
    pool = ThreadPoolExecutor(max_workers=args.jobs)
    try:
        overheads = measured_overheads(args.results)  # read once: every torch row uses them
        running = {
            pool.submit(_table_row, key, todo, args, overheads): (key, todo) for key, todo in rows
        }
        for future in as_completed(running):
            (workload, framework, strategy), todo = running[future]
            try:
                answers, wall = future.result()
            except Exception as exc:  # noqa: BLE001 - one row's fault; the others are kept
                failed += 1
                console.print(f"{workload} {framework} {strategy}: not predicted: {exc!r}")
                continue
            for c, answer in zip(todo, answers, strict=True):
                row = asdict(answer) | {
                    "wall_seconds": wall, "jobs": args.jobs, "commit": commit,
                    "budget_bytes": args.budget, "card_description": c.description,
                    "card_memory_bytes": c.memory_bytes,
                }  # fmt: skip
                key = (workload, framework, strategy)
                # an error row is made again: the new answer takes its place
                done[c.name] = [r for r in done[c.name] if _key(r) != key] + [row]
                write_json_atomic(files[c.name], done[c.name])
                failed += answer.status == "error"
                console.print(
                    f"{c.name} {workload} {framework} {strategy}: {answer.status} "
                    f"batch {answer.batch} ({answer.predictions} predictions, {wall:.0f} s) "
                    f"{answer.reason[:120]}",
                    soft_wrap=True,
                )
    except BaseException:  # interrupted: the rows kept so far stay, the rest end now
        pool.shutdown(wait=False, cancel_futures=True)
        stop_predictors()
        raise
    pool.shutdown()
    return 1 if failed else 0


def _table_row(key: tuple[str, str, str], todo: list, args: argparse.Namespace, overheads):
    """One row's answers on the cards that lack it, and the seconds they took."""
    from membench.gpu_predict.capacity import (
        CardAnswer,
        compiled_capacities,
        torch_capacities,
        torch_limit,
    )
    from membench.gpu_predict.overhead import process_overhead
    from membench.gpu_predict.run import PredictionUnavailable, jax_limit, predictor

    workload, framework, strategy = key
    step = registry.strategy(strategy).accumulate
    cell = {"workload": workload, "framework": framework, "strategy": strategy,
            "batch_size": step, "preset": args.preset}  # fmt: skip
    t0 = time.perf_counter()
    try:
        predictor(framework)
    except PredictionUnavailable as exc:
        answers = [CardAnswer(*key, c.name, 0, "unsupported", str(exc)) for c in todo]
        return answers, time.perf_counter() - t0
    if framework == "torch":
        targets, extra = [], []
        for c in todo:
            found = process_overhead(overheads, workload, c.device_kind)
            overhead = found[0] if found else 0.0
            limit = c.budget_limit(args.budget) if args.budget else torch_limit(c, overhead)
            targets.append((c, limit))
            how = found[1] if found else "none measured"
            extra.append({"process_overhead_bytes": overhead, "process_overhead": how})
        answers = torch_capacities(cell, targets, args.max_batch, step)
        for answer, more in zip(answers, extra, strict=True):
            answer.at_answer.update(more)
    else:
        targets = [(c, c.budget_limit(args.budget) if args.budget else jax_limit(c)) for c in todo]
        answers = compiled_capacities(cell, targets, args.max_batch, step)
    return answers, time.perf_counter() - t0


def _key(row: dict) -> tuple[str, str, str]:
    return row["workload"], row["framework"], row["strategy"]


def _keys(rows: list[dict]) -> set[tuple[str, str, str]]:
    """The rows a table holds: answered or refused (an error row is made again)."""
    return {_key(r) for r in rows if r["status"] != "error"}
