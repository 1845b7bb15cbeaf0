"""Each release's environment on an interpreter it supports: its Requires-Python chooses,
a line may name one (a bridge), a missing one makes the release's cells unsupported, and
`--new` merges what several interpreters see on the index."""

import sys

import pytest

from membench.records import Cell, RecordStore
from membench.releases import pythons, sweep
from membench.releases.versions import newer_releases, seen_by
from membench.stacks import VersionsFileError, parse_stack

FOUND = {"3.11": "/py/3.11", "3.12": "/py/3.12", "3.13": "/py/3.13"}


def test_a_release_runs_on_the_projects_interpreter_where_its_requires_python_allows():
    choice = pythons.choose(">=3.10", FOUND, mine="3.11")
    assert (choice.python, choice.path, choice.why) == ("3.11", "/py/3.11", "the project's own")


def test_a_release_that_needs_a_newer_python_gets_the_oldest_found_that_it_allows():
    choice = pythons.choose(">=3.12", FOUND, mine="3.11")
    assert (choice.python, choice.why) == ("3.12", "Requires-Python >=3.12")
    assert pythons.choose(">=3.12,<3.13", {"3.13": "/a", "3.12": "/b"}, mine="3.11").path == "/b"


def test_no_interpreter_that_the_release_allows_says_what_it_needs_and_what_was_found():
    with pytest.raises(pythons.NoInterpreter, match=r"requires Python >=3\.14; found here only "
                       r"3\.11, 3\.12, 3\.13 \(name one with MEMBENCH_PYTHON_3_X"):  # fmt: skip
        pythons.choose(">=3.14", FOUND, mine="3.11")
    with pytest.raises(pythons.NoInterpreter, match="names Python 3.14, not found here"):
        pythons.choose("", FOUND, named="3.14", mine="3.11")


def test_the_requires_python_of_a_release_is_read_from_the_index_page_files():
    files = [  # PEP 691's JSON page of a distribution, as the index serves it (synthetic)
        {"filename": "jax-0.10.2-py3-none-any.whl", "requires-python": ">=3.11"},
        {"filename": "jax-0.11.2-py3-none-any.whl", "requires-python": ">=3.12"},
        {"filename": "jax-0.11.20.tar.gz", "requires-python": ">=3.14"},
        {"filename": "nvidia_ml_py-13.0.1-py3-none-any.whl", "requires-python": ""},
    ]
    assert pythons.release_requirement(files, "jax", "0.11.2") == ">=3.12"
    assert pythons.release_requirement(files, "jax", "0.10.2") == ">=3.11"
    assert pythons.release_requirement(files, "nvidia-ml-py", "13.0.1") == ""
    with pytest.raises(LookupError, match="no file of jax 0.9.9"):
        pythons.release_requirement(files, "jax", "0.9.9")


def test_interpreters_are_found_by_setting_and_the_projects_own_is_always_there(tmp_path):
    found = pythons.found_pythons({"PATH": str(tmp_path), "PYENV_ROOT": str(tmp_path),
                                   "MEMBENCH_PYTHON_3_99": sys.executable})  # fmt: skip
    assert found[pythons.own()] == sys.executable
    assert "3.99" not in found  # a setting is kept only where it runs that Python


def test_a_line_naming_an_interpreter_is_a_bridge_with_a_label_of_its_own():
    bridge = parse_stack("jax==0.10.2 jaxlib==0.10.2 numpy==2.2.6 python==3.12")
    plain = parse_stack("jax==0.10.2 jaxlib==0.10.2 numpy==2.2.6")
    assert (bridge.label, bridge.python, plain.label, plain.python) == (
        "jax-0.10.2-py3.12", "3.12", "jax-0.10.2", None
    )  # fmt: skip
    assert bridge.requirements == ["jax==0.10.2", "jaxlib==0.10.2", "numpy==2.2.6"]
    newer = parse_stack("jax==0.11.2 jaxlib==0.11.2")
    order = sorted([newer, bridge, plain], key=sweep.release_order)
    assert [s.label for s in order] == ["jax-0.10.2", "jax-0.10.2-py3.12", "jax-0.11.2"]
    assert parse_stack("jax==0.10.2 python-dateutil==2.9.0").python is None
    for bad in ("jax==0.10.2 python=3.12", "jax==0.10.2 python==3.12 python==3.13"):
        with pytest.raises(VersionsFileError, match="named once, as python==3.X"):
            parse_stack(bad)


def test_new_merges_what_each_interpreter_is_served():
    served = {"3.12": ["0.12.0", "0.11.2", "0.10.2"], "3.11": ["0.10.2", "0.9.2"]}
    seen = seen_by(served)
    assert seen == {"0.10.2": ["3.11", "3.12"], "0.9.2": ["3.11"], "0.11.2": ["3.12"],
                    "0.12.0": ["3.12"]}  # fmt: skip
    listed = [parse_stack("jax==0.10.2"), parse_stack("jax==0.10.2 python==3.12")]
    assert newer_releases(listed, list(seen)) == ["0.11.2", "0.12.0"]


def test_a_release_no_interpreter_here_can_run_is_recorded_unsupported_with_the_reason(tmp_path):
    stack = parse_stack("jax==0.11.2 jaxlib==0.11.2")
    steps = sweep.plan([Cell("transformer", "jax", "baseline", 4, "releases")], [stack])
    why = "jax-0.11.2 cannot run here: the release requires Python >=3.12; found here only 3.11"
    done = sweep.run(steps, tmp_path, unsupported={stack.label: why})
    ((step, record),) = done
    assert (record.status, record.reason) == ("unsupported", why)
    stored = RecordStore(tmp_path / "jax-0.11.2").get(step.cell)
    assert stored is not None and stored.reason == why
    assert stored.environment["env"]["MEMBENCH_STACK"] == stack.spec
