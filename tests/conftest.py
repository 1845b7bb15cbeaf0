import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PLUGIN = "tests.plugins.fake_framework"


@pytest.fixture
def fake_framework(monkeypatch):
    """Register the test-double framework here and in every worker this test spawns."""
    import importlib

    importlib.import_module(PLUGIN)
    monkeypatch.setenv("MEMBENCH_PLUGINS", PLUGIN)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return "fake"


@pytest.fixture
def store(tmp_path):
    from membench.records import RecordStore

    return RecordStore(tmp_path / "store")


def fresh_clone(tmp_path_factory, venv_tool: str):
    """A fresh clone of this repository sharing its .venv (the README's install), or a skip
    where that .venv lacks venv_tool (e.g. asv, membench)."""
    import subprocess

    import pytest

    if not (REPO / ".venv" / "bin" / venv_tool).exists():
        pytest.skip("no .venv: run scripts/install.sh")
    root = tmp_path_factory.mktemp("fresh") / "membench"
    subprocess.run(["git", "clone", "-q", str(REPO), str(root)], check=True)
    (root / ".venv").symlink_to(REPO / ".venv")
    return root


# -- tests in parallel (pytest-xdist), the few that need a quiet host alone ----------------------
# The suite runs on two pytest workers (pyproject's addopts). A test marked quiet_host asserts
# what the other processes on the host do to a measurement (the foreign CPU share, a kill's
# timing under load): it runs while the other worker waits, through one lock file per run
# that every test holds shared and a quiet_host test holds exclusively. A turnstile lock taken
# before either keeps a waiting quiet_host test from being passed over.


def _run_locks(config) -> tuple[object, object] | None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:  # not under xdist: one process, nothing to share
        return None
    if not hasattr(config, "_membench_locks"):
        import tempfile

        base = Path(tempfile.gettempdir()) / f"membench-tests-{workerinput['testrunuid']}"
        config._membench_locks = tuple(open(f"{base}.{n}.lock", "a+") for n in ("turn", "run"))  # noqa: SIM115
    return config._membench_locks


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import fcntl

    locks = _run_locks(item.config)
    if locks is None:
        yield
        return
    turn, run = locks
    alone = item.get_closest_marker("quiet_host") is not None
    fcntl.flock(turn, fcntl.LOCK_EX)
    try:
        fcntl.flock(run, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
    finally:
        fcntl.flock(turn, fcntl.LOCK_UN)
    try:
        yield
    finally:
        fcntl.flock(run, fcntl.LOCK_UN)
