"""membench versions: the selection under every framework version of
requirements/versions.txt, one asv environment each."""

from __future__ import annotations

import argparse

from membench import argtypes, paths
from membench.commands.common import (
    add_batch,
    add_engine,
    add_names,
    console,
    dirty_results,
    fail,
    preset_of,
)
from membench.records import RecordStore

WITHOUT_RAY = (
    "--engine ray does not apply: asv builds one virtualenv per framework version on this "
    "machine and measures every cell inside asv's own benchmark process there, so there is "
    "no cell to hand to a Ray task on another node. Run `membench versions` on each machine "
    "(or spread `membench bench --engine ray` over the cluster for the default environment)."
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "versions",
        help="measure under every framework version of requirements/versions.txt (asv envs)",
    )
    add_names(p, "workload", "strategy")
    add_batch(p)
    p.add_argument(
        "-p", "--preset", type=argtypes.name, help="smoke, cpu or gpu (default: from the device)"
    )
    p.add_argument(
        "--only",
        type=argtypes.names,
        help="frameworks or versions, e.g. jax or jax-0.7.1 (default: all)",
    )
    add_engine(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from membench.asv_suite import bench_regexes
    from membench.bench import asv_env, run_versions
    from membench.environment import detected_device, git_commit, machine_name
    from membench.versions import read_stacks, select_stacks, write_asv_config

    if args.engine == "ray":
        return fail(WITHOUT_RAY, "membench versions")
    preset = preset_of(args)
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
