"""The gpu-quick plan: valid cells, each part within one command, the whole within 25 minutes."""

import pytest

from membench import plans, registry, runner


@pytest.mark.parametrize("part", plans.GPU_QUICK, ids=lambda p: p.name)
def test_every_part_names_real_cells_on_a_gpu_preset_and_fits_one_command(part):
    for sel in part.cells:
        cells = runner.plan([sel.workload], sel.frameworks, sel.strategies, sel.preset,
                            sel.batch_sizes)  # fmt: skip
        assert cells and registry.preset(sel.preset).gpu
    for search in part.searches:
        assert registry.preset(search.preset).gpu and search.budget_bytes > 0
    assert plans.estimate_seconds(part) <= plans.PART_SECONDS


def test_the_plan_with_its_set_up_is_estimated_within_25_minutes():
    total = plans.SETUP_SECONDS + sum(plans.estimate_seconds(p) for p in plans.GPU_QUICK)
    assert 15 * 60 < total <= 25 * 60


def test_the_cost_model_charges_compile_and_bigger_batches():
    base = plans.cell_seconds("resnet50", "torch", "baseline", 64, "gpu-quick")
    assert plans.cell_seconds("resnet50", "torch", "baseline", 256, "gpu-quick") > base
    assert plans.cell_seconds("resnet50", "torch", "compile", 64, "gpu-quick") >= base + 90


def test_an_unknown_part_lists_the_valid_ones():
    with pytest.raises(registry.UnknownNameError, match="resnet50, unet3d-gpt2, jittor"):
        plans.part("gpu-quick", "everything")
