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
