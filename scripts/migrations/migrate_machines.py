"""Move results named after the machine names that stood for several host kinds
(cpu-<arch>-<cores>core-<memory>gib: Intel and AMD hosts alike) to the machine each
measurement's own host names (membench.environment.machine_for). Nothing is measured again
and no measured value changes. Idempotent: a second run finds nothing to move.

    .venv/bin/python scripts/migrations/migrate_machines.py [--results results] [--dry-run]

- Records (results/records, results/capacity's probes, results/calibration's records-*,
  results/timelines): each record goes to the machine its environment names (its CPU, cores
  and memory; the CPU's numbers and flags where it has them, else a label such as
  amd-epyc-2core-24gib), within a store of the same name; environment.machine says the new
  name and environment.machine_before_migration the old. A record without an environment
  (refused before its worker ran) and every other file of a store (capacity.json, the
  model's errors) go with the store's majority; a record's own files (logs/<cell>.*,
  timelines/<cell>.*, traces/<cell>.*) with the record. A store whose records name two
  machines is split, and said so.
- Calibrations (results/calibration/<machine>/<framework>-<version>.json) go with the host of
  the calibration records of their commit; their machine (and records path) follow.
- Fairness checks (results/selfcheck) go to the machine of their cpu, host_cpu_count and the
  old name's memory.
- asv's result files go to the machine of the records their commit stored (results/records
  and results/capacity stores named after the commit; where none is left in the tree, those
  that git history added): a commit whose records name two machines cannot be split (one asv
  file holds them all), so it goes to their majority, and the output says so. Its
  params.machine is the new name, and its machine fields (os without the kernel's build,
  arch, cpu, num_cpu, ram) the new machine's description, which its machine.json holds.

Files are rewritten in the format they were written in (each file's is detected, and one
that matches none is left alone and named).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from membench.environment import asv_machine_fields, machine_for

REPO = Path(__file__).resolve().parents[2]
# The machine names written before a name said the host kind (environment.machine_name).
OLD_NAME = re.compile(r"cpu-[a-z0-9_]+-(?P<cores>\d+)core-(?P<gib>\d+)gib")
STORE_TOPS = ("records", "capacity", "calibration", "timelines")
COMPANIONS = ("logs", "timelines", "traces")  # a store's folders of per-cell files
MACHINE_FIELDS = ("arch", "cpu", "num_cpu", "os", "ram")

# The ways membench and asv write JSON: records and stores (indent 1, sorted), capacity.json
# (indent 1, in order, a newline), asv's results (compact) and its machine.json (indent 4).
FORMATS: dict[str, Callable[[object], str]] = {
    "record": lambda d: json.dumps(d, indent=1, sort_keys=True),
    "record-newline": lambda d: json.dumps(d, indent=1, sort_keys=True) + "\n",
    "list": lambda d: json.dumps(d, indent=1) + "\n",
    "asv": lambda d: json.dumps(d),
    "asv-indented": lambda d: json.dumps(d, indent=4, sort_keys=True),
}


def read(path: Path) -> tuple[object, str | None]:
    """(the JSON, the format it was written in: None where none of FORMATS writes it)."""
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    return data, next((name for name, dump in FORMATS.items() if dump(data) == text), None)


@dataclass
class Move:
    src: Path
    dst: Path
    data: object = None  # the rewritten JSON, None: the file moves as it is
    fmt: str | None = None


@dataclass
class Plan:
    moves: list[Move] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # splits, majorities, what stays
    problems: list[str] = field(default_factory=list)  # what could not be placed
    # a host's environment per new machine: its asv description
    hosts: dict[str, dict] = field(default_factory=dict)
    # per store (top, old machine, store name): the machine of each of its records
    store_machines: dict[tuple[str, str, str], Counter] = field(default_factory=dict)
    counts: Counter = field(default_factory=Counter)  # (what, old, new) -> files


def is_record(data: object) -> bool:
    return isinstance(data, dict) and "cell" in data and "status" in data


def renamed(data: dict, key: str, old: str, new: str) -> dict:
    """data with data[key] (a machine name) now new, the old kept beside it."""
    out = {**data, key: new}
    out.setdefault(f"{key}_before_migration", old)
    return out


def old_machines(results: Path) -> list[str]:
    tops = (*STORE_TOPS, "selfcheck", "asv")
    found = {p.name for t in tops if (results / t).is_dir() for p in (results / t).iterdir()}
    return sorted(m for m in found if OLD_NAME.fullmatch(m))


def plan_store(plan: Plan, results: Path, top: str, old: str, store: Path) -> None:
    """Each file of one store to the machine of its record (or the store's majority)."""
    files = sorted(p for p in store.rglob("*") if p.is_file())
    targets: dict[Path, str | None] = {}
    parsed: dict[Path, tuple[object, str | None]] = {}
    for path in files:
        rel = path.relative_to(store).parts
        if path.suffix != ".json" or any(part in COMPANIONS for part in rel[:-1]):
            continue
        data, fmt = read(path)
        if not is_record(data):
            continue
        parsed[path] = (data, fmt)
        env = data.get("environment") or {}
        machine = env.get("machine_before_migration", env.get("machine"))
        targets[path] = None
        if isinstance(machine, str) and OLD_NAME.fullmatch(machine) and env.get("cpu"):
            targets[path] = new = machine_for(env)
            if "host_memory_bytes" in env:
                plan.hosts.setdefault(new, env)
    named = Counter(t for t in targets.values() if t)
    where = f"{top}/{old}/{store.name}"
    if not named:
        plan.problems.append(f"{where}: no record names its host; left where it is")
        return
    majority = named.most_common(1)[0][0]
    if len(named) > 1:
        plan.notes.append(f"{where}: records of {len(named)} machines ({dict(named)}): split")
    unnamed = sum(1 for t in targets.values() if t is None)
    if unnamed:
        plan.notes.append(f"{where}: {unnamed} records without a host go with its majority")
    targets = {p: t or majority for p, t in targets.items()}
    plan.store_machines[(top, old, store.name)] = Counter(targets.values())
    by_cell = {(p.parent, p.name.split(".")[0]): t for p, t in targets.items()}
    for path in files:
        if path in targets:
            new = targets[path]
            data, fmt = parsed[path]
            env = data.get("environment") or {}
            if env.get("machine") == old:
                if fmt is None:
                    plan.problems.append(f"{path}: written in no known format; left alone")
                    continue
                data = {**data, "environment": renamed(env, "machine", old, new)}
            else:
                data, fmt = None, None
            plan.counts[(f"{top}/ records", old, new)] += 1
        else:
            new = by_cell.get((path.parent.parent, path.name.split(".")[0]), majority)
            data, fmt = None, None
        dst = results / top / new / path.relative_to(results / top / old)
        plan.moves.append(Move(path, dst, data, fmt))


def plan_calibrations(plan: Plan, results: Path, old: str) -> None:
    """A calibration's constants go with the host of its commit's calibration records."""
    folder = results / "calibration" / old
    everything: Counter = Counter()
    for key, machines in plan.store_machines.items():
        if key[:2] == ("calibration", old):
            everything.update(machines)
    for path in sorted(folder.glob("*.json")):
        data, fmt = read(path)
        if not isinstance(data, dict) or fmt is None:
            plan.problems.append(f"{path}: not a calibration this script knows; left alone")
            continue
        commit = str(data.get("commit", ""))[:12]
        own = plan.store_machines.get(("calibration", old, f"records-{commit}"))
        machines = own or everything
        if not machines:
            plan.problems.append(f"{path}: no calibration records name a host; left alone")
            continue
        new = machines.most_common(1)[0][0]
        if not own:
            plan.notes.append(f"{path.name}: its commit's records are gone; majority {new}")
        if data.get("machine") == old:
            data = renamed(data, "machine", old, new)
            if isinstance(data.get("records"), str):
                data["records"] = data["records"].replace(f"/{old}/", f"/{new}/")
        plan.counts[("calibrations", old, new)] += 1
        plan.moves.append(Move(path, results / "calibration" / new / path.name, data, fmt))


def plan_selfchecks(plan: Plan, results: Path, old: str) -> None:
    """A fairness check keeps its CPU and cores; its memory is the old name's."""
    gib = int(OLD_NAME.fullmatch(old).group("gib"))  # type: ignore[union-attr]
    for path in sorted((results / "selfcheck" / old).glob("*.json")):
        data, fmt = read(path)
        if not isinstance(data, dict) or not data.get("cpu") or fmt is None:
            plan.problems.append(f"{path}: no CPU named (or an unknown format); left alone")
            continue
        facts = {
            "cpu": data["cpu"],
            "cpu_count": data.get("host_cpu_count"),
            "host_memory_bytes": gib * 2**30,
        }
        new = machine_for(facts)
        if data.get("machine") == old:
            data = renamed(data, "machine", old, new)
        plan.counts[("selfchecks", old, new)] += 1
        plan.moves.append(Move(path, results / "selfcheck" / new / path.name, data, fmt))


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else ""


def historic_hosts(repo: Path, commit: str) -> tuple[Counter, dict[str, dict]]:
    """The machines of the records a commit stored that the tree no longer holds: those of
    the commits that added its stores, read from git."""
    short = commit[:12]
    machines: Counter = Counter()
    hosts: dict[str, dict] = {}
    pattern = f":(glob)results/*/*/*-{short}/**"
    for added in git(repo, "log", "--format=%H", "--diff-filter=A", "--", pattern).split():
        for name in git(repo, "ls-tree", "-r", "--name-only", added, "--", "results").split("\n"):
            parts = name.split("/")
            if len(parts) < 5 or parts[1] not in ("records", "capacity"):
                continue
            if not parts[3].endswith(f"-{short}") or "logs" in parts or parts[-1][-5:] != ".json":
                continue
            try:
                data = json.loads(git(repo, "show", f"{added}:{name}") or "null")
            except ValueError:
                continue
            env = data.get("environment") if is_record(data) else None
            if env and env.get("cpu") and OLD_NAME.fullmatch(str(env.get("machine", ""))):
                new = machine_for(env)
                machines[new] += 1
                hosts.setdefault(new, env)
    return machines, hosts


def plan_asv(plan: Plan, results: Path, old: str, repo: Path) -> None:
    """Each asv result file to the machine of its commit's records."""
    folder = results / "asv" / old
    for path in sorted(folder.glob("*.json")):
        if path.name == "machine.json":
            continue  # written anew per machine below; the old one goes with its folder
        data, fmt = read(path)
        if not isinstance(data, dict) or "commit_hash" not in data or fmt is None:
            plan.problems.append(f"{path}: not an asv result this script knows; left alone")
            continue
        commit = str(data["commit_hash"])
        machines: Counter = Counter()
        for (top, machine, store), counts in plan.store_machines.items():
            if top in ("records", "capacity") and machine == old:
                if store.endswith(f"-{commit[:12]}"):
                    machines.update(counts)
        source = "its records"
        if not machines:
            machines, hosts = historic_hosts(repo, commit)
            for name, env in hosts.items():
                plan.hosts.setdefault(name, env)
            source = "its records in git history (no longer in the tree)"
        if not machines:
            plan.problems.append(f"{path}: no records of {commit[:12]} name a host; left alone")
            continue
        new = machines.most_common(1)[0][0]
        if len(machines) > 1:
            plan.notes.append(
                f"asv {path.name}: the records of {commit[:12]} span {dict(machines)}: one asv "
                f"file cannot be split, so it goes to their majority, {new}"
            )
        else:
            plan.notes.append(f"asv {path.name}: {new}, from {source}")
        params = dict(data.get("params") or {})
        fields = asv_machine_fields(plan.hosts[new])
        params = {**params, **{k: fields[k] for k in MACHINE_FIELDS}, "machine": new}
        plan.counts[("asv results", old, new)] += 1
        moved = {**data, "params": params}
        plan.moves.append(Move(path, results / "asv" / new / path.name, moved, fmt))
    if (folder / "machine.json").exists():
        plan.moves.append(Move(folder / "machine.json", folder / "machine.json"))  # removed


def plan_all(results: Path, repo: Path) -> Plan:
    plan = Plan()
    for old in old_machines(results):
        for top in STORE_TOPS:
            folder = results / top / old
            if folder.is_dir():
                for store in sorted(p for p in folder.iterdir() if p.is_dir()):
                    plan_store(plan, results, top, old, store)
        plan_calibrations(plan, results, old)
        plan_selfchecks(plan, results, old)
        plan_asv(plan, results, old, repo)
    return plan


def machine_files(plan: Plan, results: Path) -> list[tuple[Path, str]]:
    """asv's machine.json of every machine an asv result moves to: its stable fields, as
    asv writes it after membench.publish.asv_plugin.describe."""
    from asv.machine import Machine

    out = []
    asv = results / "asv"
    for new in sorted({m.dst.parent.name for m in plan.moves if m.dst.parent.parent == asv}):
        if new in plan.hosts and not OLD_NAME.fullmatch(new):
            fields = asv_machine_fields(plan.hosts[new])
            data = {"machine": new, **{k: fields[k] for k in MACHINE_FIELDS}}
            text = json.dumps({**data, "version": Machine.api_version}, indent=4, sort_keys=True)
            out.append((asv / new / "machine.json", text))
    return out


def held_stores(moves: Iterable[Move]) -> list[Path]:
    """Stores whose lock a run holds (membench.store_lock): never moved under a run."""
    held = []
    for lock in sorted({p for m in moves for p in m.src.parents if (p / ".lock").is_file()}):
        with open(lock / ".lock") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(lock)
    return held


def carry_out(plan: Plan, results: Path) -> list[str]:
    """Write and move; problems for destinations that already hold something else."""
    problems = []
    for move in plan.moves:
        if move.src == move.dst:  # an old machine.json
            move.src.unlink()
            continue
        text = None if move.data is None else FORMATS[str(move.fmt)](move.data)
        if move.dst.exists():
            same = (
                move.dst.read_bytes() == move.src.read_bytes()
                if text is None
                else move.dst.read_text(encoding="utf-8") == text
            )
            if same:
                move.src.unlink()
            else:
                problems.append(f"{move.dst} exists with other content: {move.src} left")
            continue
        move.dst.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            os.replace(move.src, move.dst)
        else:
            move.dst.write_text(text, encoding="utf-8")
            os.chmod(move.dst, move.src.stat().st_mode & 0o777)
            move.src.unlink()
    for path, text in machine_files(plan, results):
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    for old in old_machines(results):  # folders left empty
        for top in (*STORE_TOPS, "selfcheck", "asv"):
            folder = results / top / old
            for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
                if not any(sub.iterdir()):
                    sub.rmdir()
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    return problems


def report(plan: Plan) -> None:
    for note in plan.notes:
        print(note)
    for (what, old, new), n in sorted(plan.counts.items()):
        print(f"{n:5d} {what}: {old} -> {new}")
    for problem in plan.problems:
        print(f"NOT MOVED: {problem}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=REPO / "results")
    parser.add_argument("--repo", type=Path, default=REPO, help="the git clone (history)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, move nothing")
    args = parser.parse_args(argv)
    results = args.results.resolve()
    plan = plan_all(results, args.repo)
    if not plan.moves:
        print(f"nothing to migrate under {results}")
        return 1 if plan.problems else 0
    report(plan)
    if args.dry_run:
        return 1 if plan.problems else 0
    if held := held_stores(plan.moves):
        print(f"a run holds {', '.join(map(str, held))}: nothing moved", file=sys.stderr)
        return 2
    problems = carry_out(plan, results)
    for problem in problems:
        print(f"NOT MOVED: {problem}", file=sys.stderr)
    return 1 if plan.problems or problems else 0


if __name__ == "__main__":
    sys.exit(main())
