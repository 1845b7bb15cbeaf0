"""Read the settled GPU capacity searches again on the layer each framework's device limit
binds (membench.capacity.search.reread): torch's searches written before its budget layer
became the caching allocator's reserve (the limit torch enforces) kept their peaks, fitted
line and margins on its allocated peak. Nothing is measured again: the probes, their verdicts
(decided by real out-of-memory) and the answers stay; a search whose stored records would
change a verdict is left as it is, and named. Idempotent: a second run changes nothing.

    .venv/bin/python scripts/migrations/migrate_device_layer.py [--results results] [--dry-run]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from membench import paths
from membench.capacity.search import reread
from membench.records import load_capacity_results, save_capacity_results


def migrate(results: Path, dry_run: bool) -> int:
    """Rewrite every capacity file with a search to read again; the number rewritten."""
    changed = 0
    for path in sorted((results / "capacity").glob(f"*/*/{paths.CAPACITY_FILE}")):
        where = f"{path.parent.parent.name}/{path.parent.name}"
        try:
            before = load_capacity_results(path)
        except ValueError as exc:
            print(f"left as it is: {where}: {exc}")
            continue
        after = []
        for r in before:
            try:
                after.append(reread(r, path.parent / paths.PROBES))
            except (ValueError, KeyError) as exc:  # KeyError: a strategy no longer registered
                print(f"left as it is: {where} {r.framework} {r.strategy}: {exc}")
                after.append(r)
        moved = [a for a, b in zip(after, before, strict=True) if a != b]
        for r in moved:
            margin = (
                "no margin"
                if r.margin_bytes is None
                else f"margin {r.margin_bytes / 2**20:,.0f} MiB"
            )
            print(f"{where}: {r.workload} {r.framework} {r.strategy}: {r.budget_layer}, {margin}")
        if moved:
            changed += 1
            if not dry_run:
                save_capacity_results(after, path)
    return changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    args = p.parse_args(argv)
    n = migrate(args.results, args.dry_run)
    print(f"{n} capacity file(s) {'would be ' if args.dry_run else ''}rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
