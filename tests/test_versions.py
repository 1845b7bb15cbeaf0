"""Framework versions as data: the versions file, the asv matrix it becomes, and what a
benchmark process does inside one version's environment."""

import json
from pathlib import Path

import pytest

from membench.publish import asv_suite
from membench.registry import UnknownNameError
from membench.releases.versions import (
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


def test_the_committed_versions_file_lists_the_current_releases_of_all_three_frameworks():
    stacks = read_stacks(VERSIONS_FILE)
    cpu = {s.label for s in select_stacks(stacks, "cpu")}
    assert {"jax-0.10.2", "jax-0.11.2", "jax-0.12.0.1"} <= cpu
    # the older JAX releases are retired from the sweep: their committed sweeps judged them
    assert not {"jax-0.7.1", "jax-0.8.3", "jax-0.9.2"} & cpu
    assert "# cpu,gpu  jax==0.9.2 " in VERSIONS_FILE.read_text()
    # jax 0.11 needs Python 3.12: 0.10.2 measured on it too, the bridge between the two
    assert next(s for s in stacks if s.label == "jax-0.10.2-py3.12").python == "3.12"
    assert {"jittor-1.3.9.14", "jittor-1.3.10.0", "jittor-1.3.11.0"} <= cpu
    # torch's CPU build apart from the registry's default builds, whose releases compare
    assert {"torch-2.13.0+cpu", "torch-2.13.0", "torch-2.14.1", "torch-2.15.0"} <= cpu
    default = next(s for s in stacks if s.label == "torch-2.13.0")
    assert default.spec.startswith("torch===2.13.0 ")  # exactly that release, not 2.13.0+cpu


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


def test_asv_records_one_environment_per_release_without_building_any():
    stacks = [parse_stack("jax==0.7.1 numpy==1.26.4"), parse_stack("jax==0.10.2 numpy==2.2.6")]
    conf = asv_config(stacks)
    assert conf["environment_type"] == "checkout"  # this interpreter: asv builds nothing
    assert conf["matrix"] == {"env": {"MEMBENCH_STACK": [s.spec for s in stacks]}}
    assert ".membench.publish.asv_plugin" in conf["plugins"]
    assert Path(conf["results_dir"]).name == "asv"  # the same history as the default env
    json.dumps(conf)  # asv reads it as JSON


def test_a_newer_release_is_proposed_as_the_newest_line_moved_to_it():
    from membench.releases.versions import newer_releases, proposed_spec

    jax = [parse_stack("jax==0.9.2 jaxlib==0.9.2 flax==0.12.6"), parse_stack("jax==0.10.2 "
           "jaxlib==0.10.2 flax==0.12.8 optax==0.2.8 numpy==2.2.6")]  # fmt: skip
    served = ["0.11.1rc1", "0.11.0", "0.10.2", "0.10.1", "0.9.2", "0.11.0+local", "nonsense"]
    assert newer_releases(jax, served) == ["0.11.0"]  # no pre-release, local build or older
    assert proposed_spec(jax[1], "0.11.0") == (
        "jax==0.11.0 jaxlib==0.11.0 flax==0.12.8 optax==0.2.8 numpy==2.2.6"
    )
    torch = parse_stack("torch===2.13.0 numpy==2.2.6")
    assert torch.label == "torch-2.13.0"
    assert proposed_spec(torch, "2.15.0") == "torch===2.15.0 numpy==2.2.6"


def test_the_sweep_interleaves_the_releases_of_a_framework_cell_by_cell_oldest_first():
    from membench.records import Cell
    from membench.releases import sweep

    stacks = [parse_stack(s) for s in ("jax==0.10.2", "jax==0.9.2", "torch==2.14.1", "jax==0.7.1")]
    cells = [Cell("transformer", f, s, 4, "releases") for s in ("baseline", "infer")
             for f in ("jax", "torch", "jittor")]  # fmt: skip
    steps = sweep.plan(cells, stacks)
    assert [(s.cell.strategy, s.cell.framework, s.stack.version) for s in steps] == [
        ("baseline", "jax", "0.7.1"),
        ("baseline", "jax", "0.9.2"),
        ("baseline", "jax", "0.10.2"),
        ("baseline", "torch", "2.14.1"),
        ("infer", "jax", "0.7.1"),
        ("infer", "jax", "0.9.2"),
        ("infer", "jax", "0.10.2"),
        ("infer", "torch", "2.14.1"),
    ]  # fmt: skip  (jittor: no release listed, no step)
    control = sweep.control_for(sweep.supervision.DEFAULT_CONTROL, stacks[0])
    assert control.interpreters == {"jax": str(sweep.environment_python(stacks[0]))}
    assert sweep.store_of(Path("/s"), stacks[0]).root == Path("/s/jax-0.10.2")


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
