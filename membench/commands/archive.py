"""membench pack and unpack: a machine's results as one archive, and back into results/."""

from __future__ import annotations

import argparse

from membench import argtypes, paths
from membench.commands.parsing import console, fail


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pack", help="a machine's results (records, capacity, asv) as one archive")
    p.add_argument("archive", type=argtypes.writable_file, help="the .tar.gz to write")
    p.add_argument("--machine", type=argtypes.machine, help="default: this machine's name")
    p.add_argument("--force", action="store_true", help="replace the archive if it exists")
    p.set_defaults(func=pack)
    p = sub.add_parser("unpack", help="put archives from `membench pack` into results/")
    p.add_argument(
        "archives", type=argtypes.checked_path, nargs="+",
        help="the .tar.gz files `membench pack` wrote (one or more)",
    )  # fmt: skip
    p.set_defaults(func=unpack)


def pack(args: argparse.Namespace) -> int:
    from membench.environment import machine_name
    from membench.publish.archive import ArchiveError, pack

    machine = args.machine or machine_name()
    if not paths.machine_results(machine, own=True):
        machines = ", ".join(paths.result_machines()) or "none"
        return fail(f"no results for machine {machine!r} (machines: {machines})", "membench pack")
    try:
        names = pack(args.archive, machine, force=args.force)
    except ArchiveError as exc:
        return fail(str(exc), "membench pack")
    size = args.archive.stat().st_size / 2**20
    console.print(f"{args.archive} ({size:.2f} MiB): {', '.join(names)}")
    return 0


def unpack(args: argparse.Namespace) -> int:
    from membench.publish.archive import ArchiveError, unpack_all

    try:  # every archive checked before any is written
        done = unpack_all(args.archives)
    except ArchiveError as exc:
        return fail(str(exc), "membench unpack")
    for archive, (machine, folders) in zip(args.archives, done, strict=True):
        console.print(f"{archive}: {machine} -> results/ ({', '.join(folders)})")
    return 0
