"""Every asv command docs/versions.md shows, run verbatim in a fresh clone after the README's
install (its .venv, npm scripts and asv's machine description are this checkout's)."""

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from membench.environment import machine_name
from membench.metrics import kept_out_as_busy
from membench.publish.asv_run import describe_machine

from .conftest import REPO, fresh_clone

pytest.importorskip("asv")
DOC = REPO / "docs" / "versions.md"


def documented_commands() -> list[str]:
    """The lines of the bash block under "## asv on its own"."""
    section = DOC.read_text().split("## asv on its own", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_the_docs_show_asv_commands_only():
    commands = documented_commands()
    assert len(commands) >= 5 and all(".venv/bin/asv " in c for c in commands)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    root = fresh_clone(tmp_path_factory, "asv")
    # a clone of the project has its main branch (asv.conf.json's); one of a worktree may not
    subprocess.run(["git", "branch", "-f", "main", "HEAD"], cwd=root, capture_output=True)
    node_modules = REPO / "scripts" / "dashboard" / "node_modules"
    if node_modules.is_dir():
        (root / "scripts" / "dashboard" / "node_modules").symlink_to(node_modules)
    describe_machine(root)
    return root


def _run(line: str, cwd, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def test_every_documented_asv_command_runs_in_a_fresh_clone(clone):
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True, check=True
    ).stdout.strip()
    # a GPU machine's results come from its image's Python (the H200's 3.12), a CPU host's
    # from 3.11 as here
    committed_envs = {
        json.loads(p.read_text())["env_name"]
        for p in (REPO / "results" / "asv").glob("*/*.json")
        if p.name != "machine.json"
        and "virtualenv" not in p.name
        and not p.parent.name.startswith("nvidia-")
    }
    for line in documented_commands():
        if line.endswith("asv preview"):
            _preview(line, clone)
            continue
        out = _run(line, clone)
        assert out.returncode == 0, f"{line}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        if "--set-commit-hash $(git rev-parse HEAD)" in line and " run " in line:
            # the run joined the committed environment, on this machine's results
            (result,) = (clone / "results" / "asv" / machine_name()).glob(f"{commit[:8]}-*.json")
            data = json.loads(result.read_text())
            assert data["env_name"] == "checkout-py{}.{}".format(*sys.version_info[:2])
            # the same name, under Python 3.11 (a release's environment adds its stack)
            assert "checkout-py3.11" in committed_envs
            assert all(e.startswith("checkout-py3.11") for e in committed_envs)
            record_file = next(
                (clone / "results" / "records").glob(
                    f"*/smoke-{commit[:12]}/transformer--torch--baseline--bs4.json"
                )
            )
            record = json.loads(record_file.read_text())
            entry = dict(
                zip(
                    data["result_columns"],
                    data["results"]["suite.Transformer_smoke.track_peak_host_rss"],
                    strict=False,
                )
            )
            (value,) = [v for v in entry["result"] if v is not None and v == v] or [None]
            busy = kept_out_as_busy(record["metrics"], record["environment"])
            if record["status"] == "ok" and not busy:
                assert value == record["metrics"]["peak_host_rss_bytes"]
            else:  # a busy host's cell stays out of asv
                assert value is None
        if line.endswith("asv publish"):
            assert (clone / ".asv" / "html" / "vendor" / "jquery").is_dir()
            assert json.loads((clone / ".asv" / "html" / "regressions.json").read_text())
    # a partial run and the documented regeneration leave the committed catalogue as it was
    catalogue = "results/asv/benchmarks.json"
    assert (clone / catalogue).read_bytes() == (REPO / catalogue).read_bytes()


def _preview(line: str, clone) -> None:
    """`asv preview` serves the published pages until stopped (on asv's default port)."""
    server = subprocess.Popen(
        ["bash", "-c", f"exec {line}"], cwd=clone,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen("http://127.0.0.1:8080/", timeout=1) as page:
                    assert b"vendor/jquery" in page.read()
                    return
            except OSError:
                time.sleep(0.1)
        pytest.fail("asv preview served nothing on port 8080")
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(clone / ".asv" / "html", ignore_errors=True)
