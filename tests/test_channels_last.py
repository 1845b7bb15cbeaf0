"""channels-last: torch lays out the convnets' images and weights NHWC / NDHWC and computes the
same step; the knob is refused where it means nothing, with the reason."""

import pytest

torch = pytest.importorskip("torch")

from membench.backends import BuildSpec, workload_refusal  # noqa: E402
from membench.backends.jax_backend.support import SUPPORT as JAX_SUPPORT  # noqa: E402
from membench.backends.torch_backend import TorchBackend  # noqa: E402
from membench.registry import preset, strategy  # noqa: E402


def spec(name: str, workload: str = "resnet50", batch: int = 2) -> BuildSpec:
    return BuildSpec(workload, strategy(name), preset("smoke").size(workload), batch)


@pytest.mark.parametrize(
    "workload, layout", [("resnet50", "channels_last"), ("unet3d", "channels_last_3d")]
)
def test_torch_lays_out_images_and_convolution_weights_channels_last(workload, layout):
    session = TorchBackend().build(spec("channels-last", workload))
    fmt = getattr(torch, layout)
    images = session.batches[0][0]
    # (the U-Net's one input channel makes its volume both: a layout of one channel is one)
    assert images.is_contiguous(memory_format=fmt)
    assert images.is_contiguous() == (images.shape[1] == 1)
    kinds = (torch.nn.Conv2d, torch.nn.Conv3d)
    convs = [m for m in session.model.modules() if isinstance(m, kinds)]
    assert convs and all(m.weight.is_contiguous(memory_format=fmt) for m in convs)
    session.step()
    plain = TorchBackend().build(spec("baseline", workload))
    assert plain.batches[0][0].is_contiguous()
    assert torch.equal(plain.batches[0][0], images)  # the same values, another layout


def test_channels_last_means_nothing_without_convolutions_nor_in_jax():
    assert "no convolution" in workload_refusal(spec("channels-last", "transformer"))
    assert workload_refusal(spec("amp-bf16-channels-last")) is None
    assert "NHWC" in JAX_SUPPORT["memory_format"]["channels-last"]


@pytest.mark.slow
def test_a_channels_last_step_is_predicted_for_a_gpu_with_the_same_tensors():
    """The GPU predictor re-lays fake parameters (Module._apply cannot swap them): the traced
    step holds what the contiguous one holds, within a block per layer."""
    from membench.gpu_predict.cards import card
    from membench.gpu_predict.run import predict

    cell = {"workload": "resnet50", "framework": "torch", "batch_size": 8, "preset": "smoke"}
    plain = predict({**cell, "strategy": "baseline"}, card("h200"))
    relaid = predict({**cell, "strategy": "channels-last"}, card("h200"))
    assert plain.status == relaid.status == "ok", relaid.reason
    assert abs(relaid.allocated_bytes / plain.allocated_bytes - 1) < 0.01
