"""One archive per GPU command: the results of a machine (records, capacity, asv), packed on
the GPU node and unpacked into results/ here, under that machine's name.

A GPU machine returns a few files of at most 16 MiB each; one .tar.gz holds what a command
measured and everything measured before it on that machine (the folders merge on unpack).
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path, PurePosixPath

from membench import paths

MANIFEST = "membench-archive.json"
LIMIT_BYTES = 16 * 2**20


def pack(archive: Path, machine: str, results: Path | None = None) -> list[str]:
    """Write the machine's results into archive (paths relative to results/); returns them."""
    results = results or paths.RESULTS
    folders = paths.machine_results(machine, results)
    if not folders:
        raise FileNotFoundError(f"no results for machine {machine} under {results}")
    archive.parent.mkdir(parents=True, exist_ok=True)
    names = [str(p.relative_to(results)) for p in folders]
    manifest = archive.with_name(MANIFEST)
    manifest.write_text(json.dumps({"machine": machine, "paths": names}) + "\n")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(manifest, MANIFEST)
        for path, name in zip(folders, names, strict=True):
            tar.add(path, name)
    manifest.unlink()
    if archive.stat().st_size > LIMIT_BYTES:
        raise ValueError(f"{archive} is {archive.stat().st_size / 2**20:.1f} MiB, over 16 MiB")
    return names


def unpack(archive: Path, results: Path | None = None) -> tuple[str, list[str]]:
    """Extract archive into results/, refusing any path outside the machine's folders."""
    results = results or paths.RESULTS
    with tarfile.open(archive, "r:gz") as tar:
        manifest = tar.extractfile(MANIFEST)
        if manifest is None:
            raise ValueError(f"{archive}: no {MANIFEST}: not a membench archive")
        machine = json.loads(manifest.read())["machine"]
        members = []
        for member in tar.getmembers():
            if member.name == MANIFEST:
                continue
            if not paths.is_machine_result(member.name, machine):
                raise ValueError(f"{archive}: {member.name} lies outside {machine}'s results")
            members.append(member)
        results.mkdir(parents=True, exist_ok=True)
        tar.extractall(results, members=members, filter="data")
    return machine, sorted({str(PurePosixPath(*PurePosixPath(m.name).parts[:2])) for m in members})
