"""One archive per GPU command: the results of a machine (records, capacity, asv), packed on
the GPU node and unpacked into results/ here, under that machine's name.

A GPU machine returns a few files of at most 16 MiB each; one .tar.gz holds what a command
measured and everything measured before it on that machine (the folders merge on unpack).

An archive comes from another machine and is read as hostile: unpack accepts regular files
and folders only (no link, device or FIFO member), each inside the folders of the machine its
manifest names; every archive of one unpack is extracted into a temporary folder beside
results/, and the files move into results/ only once every archive has passed, so a refused
archive leaves nothing behind, not even the archives given before it.

pack never replaces a file unless told (force), and writes through a temporary name: a pack
that fails (too large, interrupted) leaves nothing at the archive's path.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath

from membench import argtypes, file_rules, paths

MANIFEST = "membench-archive.json"
LIMIT_BYTES = 16 * 2**20
# What an archive may unpack to at most (a small archive that inflates to fill the disk is
# refused before any of it is written).
UNPACKED_LIMIT_BYTES = 1 * 2**30


class ArchiveError(ValueError):
    """An archive refused whole; the message says which and why, in one line."""


def pack(
    archive: Path, machine: str, results: Path | None = None, force: bool = False
) -> list[str]:
    """Write the machine's results into archive (paths relative to results/); returns them.
    ArchiveError, with nothing written, where the machine is no machine name or has no
    results, where archive exists (unless force; a folder or FIFO never), or where the
    archive would be over LIMIT_BYTES."""
    results = results or paths.RESULTS
    try:
        argtypes.machine(machine)
    except argparse.ArgumentTypeError as exc:
        raise ArchiveError(str(exc)) from None
    if not paths.machine_results(machine, results, own=True):
        raise ArchiveError(f"no results for machine {machine!r} under {results}")
    if os.path.lexists(archive):
        if not force or file_rules.file_problem(archive):
            what = file_rules.kind(archive)
            hint = "give --force to replace it" if what == "a file" else "remove it first"
            raise ArchiveError(f"{archive} exists ({what}): {hint}, or give another path")
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
        if (size := os.path.getsize(tmp)) > LIMIT_BYTES:
            raise ArchiveError(
                f"{machine}'s results pack to {size / 2**20:.1f} MiB, over "
                f"{LIMIT_BYTES >> 20} MiB: nothing written to {archive}"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, archive)
    finally:
        Path(tmp).unlink(missing_ok=True)
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
        machine = file_rules.loads(handle.read(2**20))["machine"]
    except (ValueError, KeyError, TypeError):
        raise ArchiveError(f"{archive}: {MANIFEST} names no machine") from None
    try:
        return argtypes.machine(machine if isinstance(machine, str) else repr(machine))
    except argparse.ArgumentTypeError as exc:
        raise ArchiveError(f"{archive}: {MANIFEST} names no usable machine: {exc}") from None


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


def _moves(staged: Path, results: Path) -> tuple[list[tuple[Path, Path]], bool]:
    """(staged file, its place in results/) for every staged file, each place checked: none a
    link, a folder or a FIFO, none reached through a link leading out of results/ (ArchiveError,
    nothing moved); results/ keeps its own asv benchmark list (True where it did)."""
    top = results.resolve()
    moves, kept = [], False
    for path in sorted(p for p in staged.rglob("*") if not p.is_dir()):
        relative = path.relative_to(staged)
        dest = results / relative
        if PurePosixPath(relative.as_posix()) == OWN_CATALOGUE and dest.is_file():
            kept = True
            continue
        if not dest.parent.resolve().is_relative_to(top) or dest.is_symlink():
            raise ArchiveError(f"{dest}: a link in results/ leads outside it; nothing moved there")
        if why := file_rules.file_problem(dest):
            raise ArchiveError(f"{why}; nothing moved into results/")
        moves.append((path, dest))
    return moves, kept


def _staged(archive: Path, results: Path) -> tuple[str, list[tarfile.TarInfo], Path]:
    """The archive's machine, its members and the temporary folder beside results/ they are
    extracted into, once every member has passed (ArchiveError: refused, nothing left)."""
    if not archive.is_file():
        what = file_rules.kind(archive)
        raise ArchiveError(f"{archive}: {'no such file' if what == 'nothing' else what}")
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
    return machine, members, staged


def unpack_all(archives: list[Path], results: Path | None = None) -> list[tuple[str, list[str]]]:
    """Extract the archives into results/, all or nothing: each archive is checked and
    staged, and each file's place in results/ checked, before any file moves (ArchiveError:
    refused, nothing written). (machine, folders written) of each archive, in order."""
    results = results or paths.RESULTS
    staged: list[tuple[str, list[tarfile.TarInfo], Path]] = []
    try:
        for archive in archives:
            staged.append(_staged(archive, results))
        planned = [_moves(folder, results) for _, _, folder in staged]
        done = []
        for (machine, members, _), (moves, kept) in zip(staged, planned, strict=True):
            for path, dest in moves:
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, dest)
            folders = {str(PurePosixPath(*PurePosixPath(m.name).parts[:2])) for m in members}
            if kept:  # what this checkout kept was not unpacked
                folders.discard(str(OWN_CATALOGUE))
            done.append((machine, sorted(folders)))
        return done
    finally:
        for _, _, folder in staged:
            shutil.rmtree(folder, ignore_errors=True)


def unpack(archive: Path, results: Path | None = None) -> tuple[str, list[str]]:
    """Extract archive into results/, all or nothing (ArchiveError: refused, nothing written)."""
    return unpack_all([archive], results)[0]
