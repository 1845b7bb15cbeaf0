"""membench report: the HTML report, and the results pages under docs/results/."""

from __future__ import annotations

import argparse
import sys

from membench import argtypes, paths
from membench.commands.common import console, fail


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


def main(args: argparse.Namespace) -> int:
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
