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
