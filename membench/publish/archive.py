"""One archive per GPU command: the results of a machine (records, capacity, asv), packed on
the GPU node and unpacked into results/ here, under that machine's name.

A GPU machine returns a few files of at most 16 MiB each; one .tar.gz holds what a command
measured and everything measured before it on that machine (the folders merge on unpack).

An archive comes from another machine and is read as hostile: unpack accepts regular files
and folders only (no link, device or FIFO member), each inside the folders of the machine its
manifest names; it extracts into a temporary folder beside results/ and moves the files into
results/ only once the whole archive has passed, so a refused archive leaves nothing behind.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath

from membench import paths

MANIFEST = "membench-archive.json"
LIMIT_BYTES = 16 * 2**20
# What an archive may unpack to at most (a small archive that inflates to fill the disk is
# refused before any of it is written).
UNPACKED_LIMIT_BYTES = 1 * 2**30


class ArchiveError(ValueError):
    """An archive refused whole; the message says which and why, in one line."""


def pack(archive: Path, machine: str, results: Path | None = None) -> list[str]:
    """Write the machine's results into archive (paths relative to results/); returns them."""
    results = results or paths.RESULTS
    if not paths.machine_results(machine, results, own=True):
        raise FileNotFoundError(f"no results for machine {machine} under {results}")
    folders = paths.machine_results(machine, results)
    archive.parent.mkdir(parents=True, exist_ok=True)
    names = [str(p.relative_to(results)) for p in folders]
    manifest = (json.dumps({"machine": machine, "paths": names}) + "\n").encode()
    fd, tmp = tempfile.mkstemp(dir=archive.parent, prefix=f".{archive.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mode = len(manifest), 0o644
            tar.addfile(info, io.BytesIO(manifest))
            for path, name in zip(folders, names, strict=True):
                tar.add(path, name)
        os.chmod(tmp, 0o644)
        os.replace(tmp, archive)
    finally:
        Path(tmp).unlink(missing_ok=True)
    if archive.stat().st_size > LIMIT_BYTES:
        raise ValueError(f"{archive} is {archive.stat().st_size / 2**20:.1f} MiB, over 16 MiB")
    return names


def _machine_of(tar: tarfile.TarFile, archive: Path) -> str:
    """The machine the archive's manifest names (ArchiveError without a sound one)."""
    try:
        member = tar.getmember(MANIFEST)
    except KeyError:
        raise ArchiveError(f"{archive}: no {MANIFEST}: not a membench archive") from None
    handle = tar.extractfile(member) if member.isfile() else None
    if handle is None:
        raise ArchiveError(f"{archive}: {MANIFEST} is not a file")
    try:
        machine = json.loads(handle.read(2**20))["machine"]
    except (ValueError, KeyError, TypeError):
        raise ArchiveError(f"{archive}: {MANIFEST} names no machine") from None
    if not isinstance(machine, str) or machine in ("", ".", "..") or "/" in machine:
        raise ArchiveError(f"{archive}: {MANIFEST} names no usable machine ({machine!r})")
    return machine


def checked_members(tar: tarfile.TarFile, archive: Path, machine: str) -> list[tarfile.TarInfo]:
    """Every member but the manifest, once each has passed: a regular file or a folder inside
    the machine's results; ArchiveError names the first that does not."""
    members, total = [], 0
    for member in tar.getmembers():
        if member.name == MANIFEST:
            continue
        if not (member.isfile() or member.isdir()):
            kind = "link" if member.issym() or member.islnk() else "device or FIFO"
            raise ArchiveError(f"{archive}: {member.name} is a {kind}: archives hold files only")
        name = PurePosixPath(member.name)
        if name.is_absolute() or not paths.is_machine_result(name, machine):
            raise ArchiveError(f"{archive}: {member.name} lies outside {machine}'s results")
        total += member.size
        if total > UNPACKED_LIMIT_BYTES:
            raise ArchiveError(f"{archive}: unpacks to more than {UNPACKED_LIMIT_BYTES >> 30} GiB")
        members.append(member)
    return members


# asv's benchmark list is this checkout's, generated from its own suite: an archive's comes
# from the commit that measured it, which may be older (a search finished from the commit that
# began it), and replaces it only where results/ has none.
OWN_CATALOGUE = PurePosixPath(paths.asv_results().name, paths.ASV_BENCHMARKS)


def _move_into(staged: Path, results: Path) -> bool:
    """Merge the staged files into results/, refusing to write through a link found there;
    results/ keeps its own asv benchmark list (True where it did)."""
    top = results.resolve()
    kept = False
    for path in sorted(p for p in staged.rglob("*") if not p.is_dir()):
        relative = path.relative_to(staged)
        dest = results / relative
        if PurePosixPath(relative.as_posix()) == OWN_CATALOGUE and dest.is_file():
            kept = True
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.parent.resolve().is_relative_to(top) or dest.is_symlink():
            raise ArchiveError(f"{dest}: a link in results/ leads outside it; nothing moved there")
        os.replace(path, dest)
    return kept


def unpack(archive: Path, results: Path | None = None) -> tuple[str, list[str]]:
    """Extract archive into results/, all or nothing (ArchiveError: refused, nothing written)."""
    results = results or paths.RESULTS
    if not archive.is_file():
        raise ArchiveError(f"{archive}: no such file")
    try:
        with tarfile.open(archive, "r:gz") as tar:
            machine = _machine_of(tar, archive)
            members = checked_members(tar, archive, machine)
            results.mkdir(parents=True, exist_ok=True)
            staged = Path(tempfile.mkdtemp(dir=results, prefix=".unpack-"))
            try:
                tar.extractall(staged, members=members, filter="data")
            except BaseException:
                shutil.rmtree(staged, ignore_errors=True)
                raise
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise ArchiveError(f"{archive}: not a readable .tar.gz archive ({exc})") from None
    try:
        kept = _move_into(staged, results)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    folders = {str(PurePosixPath(*PurePosixPath(m.name).parts[:2])) for m in members}
    if kept:  # what this checkout kept was not unpacked
        folders.discard(str(OWN_CATALOGUE))
    return machine, sorted(folders)
