"""scripts/measure_clone.sh: the GPU node measures from a clean clone of the bundled commit, or
of an earlier one whose stored results it resumes from (a search a session left unsettled)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .conftest import REPO

SCRIPT = REPO / "scripts" / "measure_clone.sh"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def commit(repo: Path, name: str) -> str:
    (repo / name).write_text(name)
    git(repo, "add", name)
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", name)
    return git(repo, "rev-parse", "HEAD")


def clone(checkout: Path, bundle: Path, target: Path, *commit_: str) -> str:
    done = subprocess.run(
        ["bash", str(SCRIPT), str(bundle), str(target), *commit_],
        cwd=checkout, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout


def test_the_clone_is_at_the_bundles_head_or_at_an_earlier_commit_with_its_stored_results(
    tmp_path,
):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    git(checkout, "init", "-q")
    first = commit(checkout, "a")
    second = commit(checkout, "b")
    bundle = tmp_path / "membench.bundle"
    git(checkout, "bundle", "create", "-q", str(bundle), "HEAD")
    # what the session measured by `first` left, committed on main since, and one of `second`'s
    run = checkout / "results" / "capacity" / "gpu-box" / f"gpu-quick-24576mib-{first[:12]}"
    (run / "probes").mkdir(parents=True)
    (run / "probes" / "probe.json").write_text("stored")
    store = checkout / "results" / "records" / "gpu-box" / f"gpu-quick-{first[:12]}"
    store.mkdir(parents=True)
    (store / "cell.json").write_text("cell")
    other = checkout / "results" / "capacity" / "gpu-box" / f"gpu-quick-24576mib-{second[:12]}"
    other.mkdir(parents=True)

    target = tmp_path / "clone"
    said = clone(checkout, bundle, target)
    assert git(target, "rev-parse", "HEAD") == second and "measuring from" in said
    assert git(target, "rev-parse", "main") == second  # asv records only on its branch
    capacity = target / "results" / "capacity" / "gpu-box"
    assert [p.name for p in capacity.iterdir()] == [other.name]  # HEAD's own results only

    (capacity / run.name).mkdir()
    (capacity / run.name / "capacity.json").write_text("warm")
    clone(checkout, bundle, target, first[:8])  # a machine kept warm: the clone moves back
    assert git(target, "rev-parse", "HEAD") == first
    assert git(target, "rev-parse", "main") == second  # the branch stays the bundle's
    assert git(target, "status", "--porcelain", "--untracked-files=no") == ""
    copied = capacity / run.name
    assert (copied / "probes" / "probe.json").read_text() == "stored"
    assert (copied / "capacity.json").read_text() == "warm"  # what the clone had is kept
    assert (target / "results" / "records" / "gpu-box" / store.name / "cell.json").exists()
    assert (capacity / other.name).is_dir()  # the clone's untracked results stay

    # main commits what the first session measured; a warm machine moves forward again
    git(checkout, "add", "results")
    git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "results")
    git(checkout, "bundle", "create", "-q", str(bundle), "HEAD")
    clone(checkout, bundle, target)
    assert git(target, "rev-parse", "HEAD") == git(checkout, "rev-parse", "HEAD")
    assert git(target, "rev-parse", "main") == git(checkout, "rev-parse", "HEAD")
    assert (copied / "probes" / "probe.json").read_text() == "stored"
