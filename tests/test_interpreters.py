"""Per-framework interpreters: MEMBENCH_PYTHON_<FRAMEWORK> names the Python that runs a
framework's workers (Jittor needs numpy < 2 beside a jax that needs numpy >= 2)."""

import os
import sys

from membench import registry
from membench.cells import supervision
from membench.environment import REPO_ROOT
from membench.interpreters import framework_python, variable
from membench.records import Cell


def test_the_variable_is_named_after_the_framework():
    assert variable("jittor") == "MEMBENCH_PYTHON_JITTOR"
    assert variable("my-fw") == "MEMBENCH_PYTHON_MY_FW"


def test_without_the_variable_workers_run_under_this_interpreter(monkeypatch):
    monkeypatch.delenv("MEMBENCH_PYTHON_TORCH", raising=False)
    assert framework_python("torch") == sys.executable


def test_an_environment_of_its_own_in_the_checkout_is_used(monkeypatch, tmp_path):
    from membench import interpreters

    monkeypatch.delenv("MEMBENCH_PYTHON_JITTOR", raising=False)
    monkeypatch.setattr(interpreters, "REPO_ROOT", tmp_path)
    assert framework_python("jittor") == sys.executable
    local = tmp_path / ".venv-jittor" / "bin" / "python"
    local.parent.mkdir(parents=True)
    local.symlink_to(sys.executable)
    assert framework_python("jittor") == str(local)
    monkeypatch.setenv("MEMBENCH_PYTHON_JITTOR", sys.executable)  # the variable wins
    assert framework_python("jittor") == sys.executable


def test_a_relative_interpreter_is_found_from_the_checkout(monkeypatch, tmp_path):
    link = REPO_ROOT / ".membench" / "test-python"
    link.parent.mkdir(exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(sys.executable)
    try:
        monkeypatch.setenv("MEMBENCH_PYTHON_TORCH", ".membench/test-python")
        assert framework_python("torch") == str(link)
    finally:
        link.unlink()


def test_the_worker_runs_under_the_named_interpreter(fake_framework, store, monkeypatch, tmp_path):
    # An interpreter of its own: a launcher that notes each start, then runs this Python.
    python, starts = tmp_path / "python", tmp_path / "starts"
    python.write_text(f'#!/bin/sh\necho "$@" >> {starts}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    monkeypatch.setenv("MEMBENCH_PYTHON_FAKE", str(python))
    record = supervision.run([Cell("fake-work", "fake", "baseline", 1, "smoke")], store).records[0]
    assert record.status == "ok", record.reason
    check, start = starts.read_text().splitlines()  # asked once that it runs Python 3
    assert check.startswith("-I -c ") and start.startswith("-m membench.measure.worker --cell")
    assert record.environment["python_executable"] == sys.executable


def test_a_missing_interpreter_ends_the_cell_as_error_naming_the_variable(
    fake_framework, store, monkeypatch, tmp_path
):
    monkeypatch.setenv("MEMBENCH_PYTHON_FAKE", str(tmp_path / "nowhere" / "python"))
    record = supervision.run([Cell("fake-work", "fake", "baseline", 1, "smoke")], store).records[0]
    assert record.status == "error"
    assert "MEMBENCH_PYTHON_FAKE" in record.reason and "no executable Python" in record.reason
    assert not registry.framework_installed("fake")


def test_installed_is_asked_of_the_framework_s_interpreter(fake_framework, monkeypatch, tmp_path):
    # The fake framework's distribution is membench itself: installed for this interpreter
    # (editable) but not for a bare Python without it.
    monkeypatch.setenv("MEMBENCH_PYTHON_FAKE", sys.executable)
    assert registry.framework_installed("fake")
    bare = "/root/.pyenv/versions/3.12.1/bin/python3.12"
    if os.access(bare, os.X_OK):
        monkeypatch.setenv("MEMBENCH_PYTHON_FAKE", bare)
        assert not registry.framework_installed("fake")
