"""membench show: the records of a store, and each file in it that is not one."""

from __future__ import annotations

import argparse

from membench import argtypes
from membench.commands.parsing import console
from membench.publish.summary import print_table
from membench.records import RecordStore


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show", help="print the records of a store")
    p.add_argument(
        "store", type=argtypes.store_dir,
        help="a folder of records (e.g. .membench/records/<machine>/cpu-quick, or one under "
        "results/records/)",
    )  # fmt: skip
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
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
