"""The `membench versions` and `membench compare` commands docs/versions.md shows, run in a
fresh clone: none changes a committed file (`git status` stays clean). The commands that
measure run with --estimate here (the sweep takes most of an hour); --new asks the package
index, which a test does not."""

import re
import subprocess

import pytest

from .conftest import REPO, fresh_clone

DOC = REPO / "docs" / "versions.md"


def block(heading: str) -> list[str]:
    section = DOC.read_text().split(heading, 1)[1]
    code = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("#", 1)[0].strip() for line in code.splitlines() if line.strip()]


def test_the_sweep_section_shows_the_commands_a_reader_runs():
    commands = block("## The sweep")
    assert ".venv/bin/membench versions --estimate" in commands
    assert ".venv/bin/membench versions --new" in commands
    ci = block("## A CI job for a new release")
    assert any(c.startswith(".venv/bin/membench compare ") for c in ci)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    return fresh_clone(tmp_path_factory, "membench")


def changed(root) -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def run(line: str, root) -> subprocess.CompletedProcess:
    # the clone's own membench, not the checkout the .venv was installed from
    return subprocess.run(
        ["bash", "-c", f"PYTHONPATH={root} {line}"], cwd=root, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip


def test_the_documented_commands_leave_a_fresh_clone_clean(clone):
    compare = next(c for c in block("## A CI job for a new release") if " compare " in c)
    sweeps = [c for c in block("## The sweep") if "--new" not in c]
    for line in sweeps:
        line = line if "--estimate" in line else f"{line} --estimate"
        out = run(line, clone)
        assert out.returncode == 0, f"{line}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
        assert "nothing measured" in out.stdout + out.stderr
        assert changed(clone) == "", line
    # compare the two newest committed JAX releases as the CI job compares its pair
    base, new = re.search(r"compare (\S+) (\S+)", compare).groups()
    assert base.startswith("jax-") and new.startswith("jax-")
    out = run(".venv/bin/membench compare jax-0.9.2 jax-0.10.2", clone)
    assert out.returncode in (0, 1), out.stdout[-2000:] + out.stderr[-2000:]
    assert "regressions" in out.stdout + out.stderr
    assert changed(clone) == ""
