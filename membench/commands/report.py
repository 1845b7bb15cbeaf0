"""membench report: the HTML report, and the results pages under docs/results/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from membench import argtypes, paths
from membench.commands.parsing import console, fail


def add_parser(sub: argparse._SubParsersAction) -> None:
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
    p.set_defaults(func=main)


def holds_results(results: Path) -> bool:
    """Whether the folder holds anything a report reads: records, asv's results, capacity."""
    return bool(
        next(paths.record_files(paths.records_root(results)), None)
        or paths.asv_result_files(paths.asv_results(results))
        or paths.capacity_files(results)
    )


def main(args: argparse.Namespace) -> int:
    if not (args.docs or args.out):
        return fail("report: give --out DIR, --docs or both")
    if not holds_results(args.results):  # a page of empty tables would look like a result
        return fail(
            f"no records under {args.results} (no records/, asv/ or capacity/ results in it): "
            "nothing to report; give --results the folder that holds them",
            "membench report",
        )
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
