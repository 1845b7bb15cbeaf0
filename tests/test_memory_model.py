"""The analytic memory model: its arithmetic against hand counts, and how strategies move it."""

import pytest

from membench.memory_model import activation_elements, predict, spec_module
from membench.registry import strategy
from models.resnet50 import spec

INPUTS = {"image_size": 224}
PARAMS = 25_557_032


def test_resnet50_activation_counts_match_a_hand_count_of_the_stem_and_first_block():
    stem, outputs, insides = spec.saved_activations(INPUTS)
    # stem: conv 7x7/2 output and its ReLU output (64x112x112 each), then max-pool indices
    # kept as int64 (two float32 elements each) over 64x56x56
    assert stem == 2 * 64 * 112 * 112 + 2 * 64 * 56 * 56
    # first bottleneck (64 -> 256 at 56x56, with projection): conv1 and ReLU (64ch), conv2
    # and ReLU (64ch), conv3 (256ch), projection conv (256ch); its output after the add
    assert insides[0] == (2 * 64 + 2 * 64 + 256 + 256) * 56 * 56
    assert outputs[0] == 256 * 56 * 56
    assert len(outputs) == len(insides) == 16
    assert outputs[-1] == 2048 * 7 * 7


def test_baseline_breakdown_is_parameters_gradients_momentum_data_and_activations():
    b = predict("resnet50", strategy("baseline"), 8, INPUTS, runtime_bytes=100.0)
    assert b.runtime == 100.0
    assert b.parameters == (PARAMS + spec.BN_RUNNING_STATISTICS) * 4
    assert b.gradients == PARAMS * 4 and b.optimizer_state == PARAMS * 4  # SGD momentum
    assert b.inputs == 8 * 3 * 224 * 224 * 4
    assert b.activations == 8 * 4 * activation_elements(spec, INPUTS, checkpoint=False)
    assert b.total == pytest.approx(sum(vars(b).values()))


def test_strategies_move_only_what_they_should():
    base = predict("resnet50", strategy("baseline"), 8, INPUTS)
    ckpt = predict("resnet50", strategy("checkpoint"), 8, INPUTS)
    acc = predict("resnet50", strategy("accumulate-4"), 8, INPUTS)
    amp = predict("resnet50", strategy("amp-bf16"), 8, INPUTS)
    infer = predict("resnet50", strategy("infer"), 8, INPUTS)
    assert ckpt.parameters == base.parameters and ckpt.activations < 0.5 * base.activations
    assert acc.activations == pytest.approx(base.activations / 4)
    assert amp.activations == pytest.approx(base.activations / 2)
    assert amp.gradients == base.gradients  # float32 master weights and gradients
    assert infer.gradients == infer.optimizer_state == 0
    assert infer.activations == 8 * 4 * spec.largest_live_pair(INPUTS)
    half = predict("resnet50", strategy("infer-half"), 8, INPUTS)
    assert half.parameters == infer.parameters / 2


def test_workloads_without_a_model_are_not_predicted():
    assert spec_module("no-such-workload") is None
    assert predict("no-such-workload", strategy("baseline"), 2, INPUTS) is None


def test_the_advice_strategies_move_parameters_or_activations():
    infer = predict("resnet50", strategy("infer"), 8, INPUTS)
    resident = predict("resnet50", strategy("two-models-resident"), 8, INPUTS)
    sequential = predict("resnet50", strategy("two-models-sequential"), 8, INPUTS)
    grad = predict("resnet50", strategy("infer-grad"), 8, INPUTS)
    assert resident.parameters == 2 * infer.parameters
    assert sequential == infer  # one model at a time
    assert grad.activations == 2 * 8 * 4 * activation_elements(spec, INPUTS, checkpoint=False)
    assert grad.gradients == grad.optimizer_state == 0
    base = predict("resnet50", strategy("baseline"), 8, INPUTS)
    assert predict("resnet50", strategy("hygiene-2"), 8, INPUTS) == base  # moves nothing counted
