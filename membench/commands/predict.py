"""membench predict: the memory model's terms written again into stored records, and its guess
into stored capacity searches."""

from __future__ import annotations

import argparse

from membench import argtypes, paths
from membench.commands.parsing import console, fail
from membench.commands.store_guard import dirty_results


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="write the current memory model's prediction into stored records and its guess "
        "into stored capacity searches (after the model or a calibration changed)",
    )
    p.add_argument(
        "--results", type=argtypes.results_dir, default=paths.RESULTS, help="results folder"
    )
    p.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if any record is stale"
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Every ok record of one rank gets the terms the worker would write today (spec-only,
    and calibrated with its machine's stored calibration), and every capacity search the
    model's guess with today's calibrations; the tables read them there."""
    from membench.capacity.model_guesses import rescore
    from membench.environment import git_commit
    from membench.memory.calibration import load_all
    from membench.memory.predictions import refresh

    results = args.results
    if not args.check and (why := dirty_results(results)):
        return fail(why, "membench predict")  # written_by names a commit: one that holds the model
    try:
        calibrations = load_all(results)
    except (ValueError, KeyError, TypeError) as exc:  # a calibration file that is not one
        return fail(f"a stored calibration cannot be read: {type(exc).__name__}: {exc}")
    done = refresh(results, git_commit(), args.check, calibrations)
    guesses = rescore(results, calibrations, args.check)
    for problem in [*done.skipped, *guesses.skipped]:
        console.print(f"[yellow]skipped {problem}[/yellow]", soft_wrap=True)
    verb = "stale" if args.check else "rewritten"
    console.print(f"{len(done.changed)} of {done.records} predicted records {verb} under {results}")
    console.print(
        f"{len(guesses.changed)} capacity results files {verb} (the model's guess of "
        f"{guesses.searches} searches)"
    )
    if args.check and (done.changed or guesses.changed):
        console.print("run `membench predict`, then `membench report --docs`")
        return 1
    return 0
