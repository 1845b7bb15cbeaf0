"""membench show: the records of a store, and each file in it that is not one."""

from __future__ import annotations

import argparse
from pathlib import Path

from membench import argtypes
from membench.commands.parsing import console
from membench.publish.summary import print_table
from membench.records import CorruptRecordError, RecordStore, read_record


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show", help="print the records of a store")
    p.add_argument(
        "store", type=argtypes.store_dir,
        help="a folder of records (e.g. .membench/records/<machine>/cpu-quick, or one under "
        "results/records/)",
    )  # fmt: skip
    p.set_defaults(func=main)


SHOWN_STORES = 10  # stores named below a folder that holds none itself


def stores_below(root: Path) -> list[Path]:
    """The stores one to three levels below root: folders whose first .json file reads as a
    record (results/records holds machines, each holding stores, and a version sweep's store
    holds a store per release; results/asv holds asv's files, which are not records)."""
    found = []
    for folder in sorted({p.parent for n in (1, 2, 3) for p in root.glob("*/" * n + "*.json")}):
        try:
            read_record(min(folder.glob("*.json")))
        except (OSError, CorruptRecordError):  # not a record (NotARecordError too)
            continue
        found.append(folder)
    return found


def main(args: argparse.Namespace) -> int:
    """The store's good records, then each file that is not one with why; exit 1 if any
    file is bad or none is good."""
    store = RecordStore(args.store)
    records, bad = store.scan()
    if records:
        print_table(records, f"records in {store.root}")
    elif below := stores_below(store.root):
        shown = ", ".join(str(p) for p in below[:SHOWN_STORES])
        more = f" and {len(below) - SHOWN_STORES} more" if len(below) > SHOWN_STORES else ""
        console.print(
            f"no records in {store.root}, but in the stores below it: {shown}{more} "
            "(membench show one of them)", soft_wrap=True,
        )  # fmt: skip
    else:
        console.print(f"no records in {store.root}")
    for exc in bad:
        console.print(f"[red]{exc}[/red]", soft_wrap=True)
    return 1 if bad or not records else 0
