"""Framework versions as data: the versions file, the asv matrix it becomes, and what a
benchmark process does inside one version's environment."""

import json
from pathlib import Path

import pytest

from membench import asv_suite
from membench.registry import UnknownNameError
from membench.versions import (
    VERSIONS_FILE,
    VersionsFileError,
    asv_config,
    parse_stack,
    read_stacks,
    select_stacks,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "versions.txt"
    path.write_text(text)
    return path


def test_the_committed_versions_file_lists_three_jax_versions_for_cpu():
    stacks = read_stacks(VERSIONS_FILE)
    cpu_jax = [s.version for s in select_stacks(stacks, "cpu", ["jax"])]
    assert len(cpu_jax) >= 3 and "0.7.1" in cpu_jax
    assert not select_stacks(stacks, "cpu", None) == []
    assert all(s.framework != "torch" for s in select_stacks(stacks, "cpu"))
    assert len(select_stacks(stacks, "cpu", ["jittor"])) >= 2


def test_a_line_is_devices_and_a_spec_that_pins_the_framework_first(tmp_path):
    path = write(tmp_path, "# comment\ncpu,gpu  jax==0.7.1 jaxlib==0.7.1 numpy==1.26.4\n\n")
    (stack,) = read_stacks(path)
    assert (stack.framework, stack.version, stack.label) == ("jax", "0.7.1", "jax-0.7.1")
    assert stack.devices == ("cpu", "gpu")
    assert stack.spec == "jax==0.7.1 jaxlib==0.7.1 numpy==1.26.4"


@pytest.mark.parametrize(
    "line, message",
    [
        ("tpu jax==0.7.1", "DEVICES"),
        ("cpu jax>=0.7", "pin the framework exactly"),
        ("cpu numpy==1.26.4 jax==0.7.1", "framework distribution 'numpy'"),
        ("cpu", "DEVICES"),
    ],
)
def test_a_bad_line_is_named_with_its_file_and_number(tmp_path, line, message):
    path = write(tmp_path, f"cpu jax==0.7.1\n{line}\n")
    with pytest.raises(VersionsFileError, match=f"versions.txt:2: .*{message}"):
        read_stacks(path)


def test_a_version_listed_twice_is_refused(tmp_path):
    path = write(tmp_path, "cpu jax==0.7.1\ngpu jax==0.7.1 numpy==2.2.6\n")
    with pytest.raises(VersionsFileError, match="listed twice: jax-0.7.1"):
        read_stacks(path)


def test_selection_by_device_framework_or_label_and_unknown_names(tmp_path):
    text = "cpu,gpu jax==0.7.1\ncpu jax==0.10.2\ngpu torch==2.13.0\n"
    stacks = read_stacks(write(tmp_path, text))
    assert [s.label for s in select_stacks(stacks, "gpu")] == ["jax-0.7.1", "torch-2.13.0"]
    assert [s.label for s in select_stacks(stacks, "cpu", ["jax-0.10.2"])] == ["jax-0.10.2"]
    with pytest.raises(UnknownNameError, match="valid version on cpu names: jax, jax-0.10.2"):
        select_stacks(stacks, "cpu", ["torch"])


def test_the_asv_matrix_holds_one_environment_per_spec_installed_by_the_suite_script():
    stacks = [parse_stack("jax==0.7.1 numpy==1.26.4"), parse_stack("jax==0.10.2 numpy==2.2.6")]
    conf = asv_config(stacks)
    assert conf["environment_type"] == "virtualenv"
    assert conf["matrix"] == {"env": {"MEMBENCH_STACK": [s.spec for s in stacks]}}
    assert "scripts/install_stack.py {wheel_file}" in conf["install_command"][0]
    assert Path(conf["results_dir"]).name == "asv"  # the same history as the default env
    json.dumps(conf)  # asv reads it as JSON


def test_inside_a_version_environment_the_suite_measures_its_framework_into_its_own_store(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("MEMBENCH_STACK", "jax==0.10.2 jaxlib==0.10.2 numpy==2.2.6")
    monkeypatch.setenv("MEMBENCH_STORE", str(tmp_path))
    monkeypatch.delenv("MEMBENCH_FRAMEWORKS", raising=False)
    assert asv_suite.selected_frameworks() == ["jax"]
    assert asv_suite.suite_store().root == tmp_path / "jax-0.10.2"
    monkeypatch.delenv("MEMBENCH_STACK")
    assert asv_suite.suite_store().root == tmp_path
    assert "torch" in asv_suite.selected_frameworks()


def test_analysis_names_an_environment_from_its_spec_as_the_matrix_does():
    from membench.stacks import parse_stack, stack_label

    for spec in ("jax==0.7.1 jaxlib==0.7.1 flax==0.12.0", "torch==2.13.0+cpu", "Jittor==1.3.10.0"):
        assert stack_label(spec) == parse_stack(spec).label
    assert stack_label("jax>=0.7 flax") == "jax>=0.7"  # no pin: the requirement as written


def test_an_asv_class_name_gives_back_its_workload_and_preset():
    from membench.paths import asv_class_cell, asv_class_name

    for workload, preset in [("resnet50", "cpu-shard"), ("unet3d", "smoke"), ("tiny-mlp", "cpu")]:
        name = asv_class_name(workload, preset)
        assert asv_class_cell(name, ["resnet50", "unet3d", "tiny-mlp"]) == (workload, preset)
    assert asv_class_cell("Resnet50") == ("resnet50", "")  # named before presets were in it
