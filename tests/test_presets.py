"""Presets: the smoke preset is seconds per cell and still covers every strategy each
framework runs; what it leaves out is named, with the reason."""

import pytest

from membench import registry
from membench.backends import BuildSpec
from membench.cells import planning
from membench.records import Cell


def test_smoke_leaves_slow_cells_out_and_names_them():
    smoke = registry.preset("smoke")
    assert "generic kernels" in smoke.leaves_out("jittor", "unet3d", "baseline")
    assert smoke.leaves_out("torch", "unet3d", "baseline") is None
    cells = planning.cells_for(["unet3d"], ["torch", "jittor"], ["baseline", "amp-fp16"], "smoke")
    assert {(c.framework, c.strategy) for c in cells} == {("torch", "baseline")}
    skipped = planning.left_out(["unet3d"], ["torch", "jittor"], ["baseline", "amp-fp16"], "smoke")
    assert sum(skipped.values()) == 3 and all(skipped)
    assert registry.preset("cpu").left_out == ()  # the cpu preset measures them all


JITTOR_HALF = ("amp-bf16", "amp-fp16", "infer-half", "fused-attention-bf16")


def test_smoke_still_runs_every_strategy_each_framework_runs_on_a_cpu_once():
    sizes = registry.preset("smoke").sizes
    smoke = planning.cells_for(
        list(sizes), ["torch", "jax", "jittor"], list(registry.STRATEGIES), "smoke"
    )
    for framework in ("torch", "jax", "jittor"):
        backend = registry.load_backend(framework)
        for strategy in registry.STRATEGIES:
            runs_somewhere = any(
                backend.refusal(BuildSpec.of(Cell(w, framework, strategy, b, "smoke")), "cpu")
                is None
                for w, size in registry.preset("cpu").sizes.items()
                for b in size.batch_sizes
            )
            planned = [c for c in smoke if (c.framework, c.strategy) == (framework, strategy)]
            runs = [c for c in planned if backend.refusal(BuildSpec.of(c), "cpu") is None]
            # Jittor's half precisions compile a CPU kernel per op (minutes): cpu preset only
            jittor_half = framework == "jittor" and strategy in JITTOR_HALF
            if runs_somewhere and not jittor_half:
                assert runs, (framework, strategy)
            # once: on one workload, but the baseline on every workload the preset keeps
            workloads = {c.workload for c in planned}
            if strategy == "baseline":
                kept = {
                    w
                    for w in sizes
                    if not registry.preset("smoke").leaves_out(framework, w, strategy)
                }
                assert workloads == kept, framework
            else:
                assert len(workloads) <= 1, (framework, strategy, workloads)


def test_smoke_runs_a_strategy_on_the_first_workload_that_runs_it_within_the_selection():
    everything = ["transformer", "resnet50", "unet3d"]
    homes = planning.strategy_homes(everything, ["torch"], ["infer", "checkpoint"], "smoke")
    assert homes == {("torch", "infer"): "transformer", ("torch", "checkpoint"): "transformer"}
    # without the Transformer in the selection, the next in the preset's order (not the
    # selection's); a strategy the preset leaves out on every selected workload has no home
    homes = planning.strategy_homes(
        ["unet3d", "resnet50"], ["torch"], ["infer", "compile"], "smoke"
    )
    assert homes == {("torch", "infer"): "resnet50"}
    cells = planning.cells_for(
        ["unet3d", "resnet50"], ["torch"], ["baseline", "infer", "compile"], "smoke"
    )
    assert sorted((c.workload, c.strategy) for c in cells) == [
        ("resnet50", "baseline"), ("resnet50", "infer"), ("unet3d", "baseline")
    ]  # fmt: skip
    # a selection of one workload runs every strategy there; other presets have no homes
    cells = planning.cells_for(
        ["resnet50"], ["torch"], ["baseline", "infer", "checkpoint"], "smoke"
    )
    assert {c.strategy for c in cells} == {"baseline", "infer", "checkpoint"}
    assert planning.strategy_homes(everything, ["torch"], ["infer"], "cpu") == {}
    # what the once rule leaves out is counted with its reason
    skipped = planning.left_out(everything, ["torch"], ["baseline", "infer"], "smoke")
    assert skipped == {next(iter(skipped)): 2} and "once per framework" in next(iter(skipped))


def test_asv_leaves_the_cells_the_preset_leaves_and_measures_none(monkeypatch, tmp_path):
    from membench.publish import asv_suite

    monkeypatch.setenv("MEMBENCH_STORE", str(tmp_path))
    monkeypatch.setenv("MEMBENCH_PRESET", "smoke")
    monkeypatch.setenv("MEMBENCH_WORKLOADS", "transformer,resnet50,unet3d")
    with pytest.raises(NotImplementedError, match="once per framework"):
        asv_suite.cell_record("resnet50", "torch", "infer", 4)
    with pytest.raises(NotImplementedError, match="reference kernels"):
        asv_suite.cell_record("unet3d", "torch", "amp-fp16", 4)
    assert not list(tmp_path.glob("*.json"))  # nothing was measured
