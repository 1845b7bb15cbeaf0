"""The analytic memory model: its arithmetic against hand counts, how strategies move it, and
how calibrated constants enter it."""

import pytest

from membench.memory.memory_model import Constants, activation_elements, predict, spec_module
from membench.registry import TRANSFORMER_CPU, strategy
from models.resnet50 import spec
from models.transformer import spec as gpt
from models.unet3d import spec as unet

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
    b = predict("resnet50", strategy("baseline"), 8, INPUTS)
    assert b.runtime == 0.0  # the spec alone has no runtime part
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


def test_calibrated_constants_add_the_runtime_and_scale_only_the_activations():
    spec_only = predict("resnet50", strategy("checkpoint"), 4, INPUTS)
    cal = predict("resnet50", strategy("checkpoint"), 4, INPUTS, Constants(300e6, 1.5))
    assert cal.runtime == 300e6 and cal.activations == 1.5 * spec_only.activations
    assert (cal.parameters, cal.gradients, cal.optimizer_state, cal.inputs) == (
        spec_only.parameters,
        spec_only.gradients,
        spec_only.optimizer_state,
        spec_only.inputs,
    )
    assert cal.total == pytest.approx(spec_only.total + 300e6 + 0.5 * spec_only.activations)


def test_resnet50_parameters_follow_the_classifier():
    assert spec.trainable_parameters(INPUTS) == PARAMS
    # 10 classes: the 2048 x 1000 classifier and its bias become 2048 x 10 and 10
    assert spec.trainable_parameters({"num_classes": 10}) == PARAMS - 990 * 2049


UNET = {"volume": 16, "num_classes": 3}


def test_unet3d_counts_match_the_tests_figure_and_a_hand_count():
    assert unet.trainable_parameters(UNET) == 19_071_459  # test_unet3d's figure
    assert unet.OPTIMIZER_STATE_SLOTS == 2  # Adam
    assert unet.input_elements(UNET) == 3 * 16**3  # volume + int64 labels
    outside, outputs, insides = unet.saved_activations(UNET)
    v0, v1, v2, v3 = 16**3, 8**3, 4**3, 2**3
    # analysis levels 1->32->64, 64->64->128, 128->128->256, 256->256->512: conv1 and ReLU
    # (mid), conv2 (out) inside; the second ReLU's output is the level's output
    assert insides[:4] == [128 * v0, 256 * v1, 512 * v2, 1024 * v3]
    assert outputs[:4] == [64 * v0, 128 * v1, 256 * v2, 512 * v3]
    # synthesis levels 768->256->256 (4^3), 384->128->128 (8^3), 192->64->64 (16^3)
    assert insides[4:] == [768 * v2, 384 * v1, 192 * v0]
    assert outputs[4:] == [256 * v2, 128 * v1, 64 * v0]
    pools = 3 * 64 * v1 + 3 * 128 * v2 + 3 * 256 * v3  # indices (2) + output, per pool
    concats = 768 * v2 + 384 * v1 + 192 * v0
    head = 4 * 3 * v0  # scores, log-softmax, softmax, one-hot
    assert outside == pools + concats + head
    # inference: the last concatenation's inputs (64 + 128 channels) and its result
    assert unet.largest_live_pair(UNET) == 2 * 192 * v0


def test_transformer_counts_match_the_tests_figures_and_a_hand_count():
    assert gpt.trainable_parameters({}) == gpt.TRAINABLE_PARAMETERS == 124_439_808
    d, v, t = 256, 8192, 128
    block = (d * 3 * d + 3 * d + d * d + d) + (d * 4 * d + 4 * d + 4 * d * d + d) + 4 * d
    assert gpt.trainable_parameters(TRANSFORMER_CPU) == v * d + t * d + 4 * block + 2 * d
    assert gpt.trainable_parameters(TRANSFORMER_CPU) == 5_289_472
    assert gpt.OPTIMIZER_STATE_SLOTS == 2  # AdamW
    outside, outputs, insides = gpt.saved_activations(TRANSFORMER_CPU)
    assert outputs == [t * d] * 4
    # 15 T d inside (+ the block's input: Korthikanti's 16 T d without dropout) + heads T^2
    assert insides == [15 * t * d + 4 * t * t] * 4
    assert outside == 2 * t * d + 2 * t * v  # embedding sum, final LN; logits, log-softmax
    assert gpt.largest_live_pair(TRANSFORMER_CPU) == t * d + t * v


@pytest.mark.parametrize("workload", ["unet3d", "transformer"])
def test_checkpointing_keeps_less_and_inference_less_still(workload):
    inputs = UNET if workload == "unet3d" else TRANSFORMER_CPU
    base = predict(workload, strategy("baseline"), 4, inputs)
    ckpt = predict(workload, strategy("checkpoint"), 4, inputs)
    infer = predict(workload, strategy("infer"), 4, inputs)
    assert ckpt.activations < base.activations and infer.activations < base.activations
    assert base.optimizer_state == 2 * base.gradients  # Adam: two moments


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


def test_every_knob_is_known_to_the_model_and_a_new_one_is_refused():
    """Each knob of the registry is read by the model or named as leaving its terms alone; a
    strategy setting a knob it does not know gets no silent prediction."""
    from dataclasses import dataclass

    from membench.memory.memory_model import READ_KNOBS, UNMODELLED_KNOBS
    from membench.registry import Strategy, knob_defaults

    assert sorted([*READ_KNOBS, *UNMODELLED_KNOBS]) == sorted(knob_defaults())

    @dataclass(frozen=True)
    class WithNewKnob(Strategy):
        new_knob: bool = False

    inputs = TRANSFORMER_CPU
    assert predict("transformer", WithNewKnob("quiet", ""), 2, inputs) is not None
    with pytest.raises(ValueError, match="does not know new_knob \\(strategy loud\\): say how"):
        predict("transformer", WithNewKnob("loud", "", new_knob=True), 2, inputs)
