"""Presets: the smoke preset is seconds per cell and still covers every strategy each
framework runs; what it leaves out is named, with the reason."""

from membench import registry, runner
from membench.backends import BuildSpec
from membench.records import Cell


def test_smoke_leaves_slow_cells_out_and_names_them():
    smoke = registry.preset("smoke")
    assert "generic kernels" in smoke.leaves_out("jittor", "unet3d", "baseline")
    assert smoke.leaves_out("torch", "unet3d", "baseline") is None
    cells = runner.plan(["unet3d"], ["torch", "jittor"], ["baseline", "amp-fp16"], "smoke")
    assert {(c.framework, c.strategy) for c in cells} == {("torch", "baseline")}
    skipped = runner.left_out(["unet3d"], ["torch", "jittor"], ["baseline", "amp-fp16"], "smoke")
    assert sum(skipped.values()) == 3 and all(skipped)
    assert registry.preset("cpu").left_out == ()  # the cpu preset measures them all


JITTOR_HALF = ("amp-bf16", "amp-fp16", "infer-half", "fused-attention-bf16")


def test_smoke_still_runs_every_strategy_each_framework_runs_on_a_cpu_once():
    smoke = registry.preset("smoke")
    for framework in ("torch", "jax", "jittor"):
        backend = registry.load_backend(framework)
        for strategy in registry.STRATEGIES:
            runs_somewhere = any(
                backend.refusal(BuildSpec.of(Cell(w, framework, strategy, b, "smoke")), "cpu")
                is None
                for w, size in registry.preset("cpu").sizes.items()
                for b in size.batch_sizes
            )
            in_smoke = [
                w for w, size in smoke.sizes.items()
                if not smoke.leaves_out(framework, w, strategy)
                and backend.refusal(
                    BuildSpec.of(Cell(w, framework, strategy, size.batch_sizes[0], "smoke")), "cpu"
                ) is None
            ]  # fmt: skip
            # Jittor's half precisions compile a CPU kernel per op (minutes): cpu preset only
            jittor_half = framework == "jittor" and strategy in JITTOR_HALF
            if runs_somewhere and not jittor_half:
                assert in_smoke, (framework, strategy)
