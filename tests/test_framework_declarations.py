"""A framework's facts declared once, in its registration, and what follows from them: the cells
the short CPU presets leave out, a release's setup compiling its core, a GPU node's setup time."""

import io
import sys
from pathlib import Path

import pytest

from membench import registry
from membench.cells import gpu_session
from membench.registry.frameworks import SlowOnCpu
from membench.releases import pythons, versions

# the presets that leave out each short CPU list's cells (cpu-quick's list: three more too)
PRESETS_OF_LIST = {
    "smoke": ("smoke",),
    "quick": ("cpu-quick", "cpu-capacity", "calibrate", "releases"),
    "releases": ("releases",),
}


def test_the_short_presets_leave_out_what_each_framework_declares_too_slow():
    declared = [(f, slow) for f in registry.FRAMEWORKS.values() for slow in f.slow_on_cpu]
    assert {f.name for f, _ in declared} == {"jittor"}  # the others run every cell in minutes
    for framework, slow in declared:
        workload = slow.workloads[0] if slow.workloads else "transformer"
        strategy = slow.strategies[0] if slow.strategies else "baseline"
        for within in slow.within:
            for name in PRESETS_OF_LIST[within]:
                why = registry.preset(name).leaves_out(framework.name, workload, strategy)
                assert why is not None, (name, framework.name, workload, strategy)
    smoke = registry.preset("smoke")
    assert "generic kernels" in smoke.leaves_out("jittor", "unet3d", "baseline")
    assert registry.preset("cpu-quick").leaves_out("jittor", "resnet50", "infer-half") is None
    assert "float16" in registry.preset("releases").leaves_out("jittor", "resnet50", "infer-half")
    assert registry.preset("cpu").left_out == ()  # the cpu preset measures them all


def test_a_slow_rule_naming_no_short_list_is_refused_where_it_is_declared():
    with pytest.raises(ValueError, match="unknown short CPU lists \\['smoky'\\]"):
        SlowOnCpu(("smoky",), ("unet3d",), (), "a typo would leave the cells in")


def test_a_release_compiles_its_core_at_setup_where_its_framework_declares_a_core_build(
    tmp_path, monkeypatch
):
    ran: list[list[str]] = []

    def run(cmd: list[str], **kwargs) -> None:  # each step recorded; venv makes its folder
        ran.append(cmd)
        if cmd[1:3] == ["-m", "venv"]:
            Path(cmd[3]).mkdir(parents=True)

    monkeypatch.setattr(versions.subprocess, "run", run)
    # the project's own interpreter, as a release that allows it gets (no index asked)
    own = pythons.Choice(pythons.own(), sys.executable, "the project's own")
    monkeypatch.setattr(versions, "choose_for", lambda stack: own)
    for spec in ("jittor==1.3.11", "torch==2.9.0"):
        versions.setup_stack(versions.parse_stack(spec), io.StringIO(), tmp_path)
    builds = [cmd for cmd in ran if cmd[0] != sys.executable and cmd[2] != "pip"]
    jittor = registry.framework("jittor")
    assert jittor.core_build == "membench.backends.jittor_backend"
    assert builds == [[str(tmp_path / "jittor-1.3.11" / "bin" / "python"), "-m", jittor.core_build]]


def test_a_gpu_nodes_setup_counts_each_declared_core_build():
    builds = sum(f.core_build_gpu_seconds for f in registry.FRAMEWORKS.values())
    assert builds == registry.framework("jittor").core_build_gpu_seconds > 0
    assert gpu_session.SETUP_SECONDS == gpu_session.INSTALL_SECONDS + builds
