"""Jittor ResNet-50: the architecture, and parity with the PyTorch model from the same weights.

Jittor is installed by scripts/install.sh (its core compiled there once), so these tests
require it. torch is imported first: Jittor's oneDNN and torch's clash if torch comes second.
"""

import numpy as np
import pytest
import torch

from membench.backends.jittor_backend import (
    freeze_batchnorm,
    from_torch,
    import_into_host_process,
    onednn_in_use,
    running_statistics,
    trainable,
)

# Jittor's environment set before its import (no CUDA build, torch kept out of Jittor), and
# Python's signal handlers kept (Jittor's would end the test session when a worker is killed).
jt = import_into_host_process("cpu")

from models.resnet50 import jittor_impl  # noqa: E402
from models.resnet50 import spec as resnet_spec  # noqa: E402
from models.resnet50.torch_impl import ResNet50 as TorchResNet50  # noqa: E402
from models.resnet50.torch_impl import loss_fn as torch_loss  # noqa: E402
from models.resnet50.torch_impl import make_optimizer as torch_optimizer  # noqa: E402

from .parity import jittor_state, jittor_twin, relative_error, torch_state  # noqa: E402

INPUTS = {"image_size": 64}
BATCH = 2


@pytest.fixture(scope="module")
def torch_model():
    torch.manual_seed(0)
    return TorchResNet50()


@pytest.fixture(scope="module")
def batch():
    return jittor_impl.synthetic_batch(BATCH, INPUTS)


def sgd_step(torch_model, batch, train: bool) -> dict:
    """One SGD step on each side from the same weights: losses, and weights before/after."""
    images, labels = batch
    before = from_torch(torch_state(torch_model))

    model = TorchResNet50()
    model.load_state_dict(torch_model.state_dict())
    model.train(train)
    opt = torch_optimizer(model.parameters())
    loss_t = torch_loss(model(torch.from_numpy(images)), torch.from_numpy(labels))
    loss_t.backward()
    opt.step()

    jmodel = jittor_twin(jittor_impl, INPUTS, torch_model)
    freeze_batchnorm(jmodel, not train)
    jopt = jittor_impl.make_optimizer(jmodel.parameters())
    loss_j = jittor_impl.loss_fn(jmodel(jt.array(images)), jt.array(labels))
    jopt.step(loss_j)
    jt.sync_all(True)
    trainable = {n for n in before if not n.endswith(("running_mean", "running_var"))}
    return {
        "trainable": trainable,
        "before": before,
        "torch": {"loss": loss_t.item(), "state": from_torch(torch_state(model))},
        "jittor": {"loss": float(loss_j.item()), "state": jittor_state(jmodel)},
    }


def step_errors(step: dict) -> tuple[float, float]:
    """Relative errors of the loss and of the update itself (trainable weights only)."""
    t, j, before = step["torch"], step["jittor"], step["before"]
    loss_err = abs(j["loss"] - t["loss"]) / abs(t["loss"])
    names = step["trainable"]
    delta_t = {n: t["state"][n] - before[n] for n in names}
    delta_j = {n: j["state"][n] - before[n] for n in names}
    return loss_err, relative_error(delta_j, delta_t)


def test_onednn_is_in_use():
    # Set up by scripts/install.sh; without it convolutions run ~200x slower.
    assert onednn_in_use()


def test_parameter_counts_match_the_published_resnet50(torch_model):
    model = jittor_impl.build(INPUTS)
    weights = sum(p.numel() for p in trainable(model))
    stats = sum(p.numel() for p in running_statistics(model))
    torch_trainable = sum(p.numel() for p in torch_model.parameters())
    # Jittor lists BN running statistics among parameters (stop_grad): like with like.
    assert weights == resnet_spec.TRAINABLE_PARAMETERS == torch_trainable == 25_557_032
    assert stats == resnet_spec.BN_RUNNING_STATISTICS == 53_120
    # The same names and shapes as torch's state_dict, so weights map name for name.
    own = model.state_dict()
    converted = from_torch(torch_state(torch_model))
    assert set(own) == set(converted)
    assert all(tuple(own[k].shape) == v.shape for k, v in converted.items())


def test_init_follows_the_spec_scheme():
    jt.set_global_seed(0)
    model = jittor_impl.build(INPUTS)
    stem = model.conv1.weight.numpy()  # OIHW; fan_out = 64 * 7 * 7
    assert abs(stem.std() / np.sqrt(2.0 / (7 * 7 * 64)) - 1) < 0.05
    assert np.abs(stem).max() > 2.5 * stem.std()  # untruncated normal
    bound = 1 / np.sqrt(resnet_spec.FEATURES)
    for leaf in (model.fc.weight.numpy(), model.fc.bias.numpy()):
        assert np.abs(leaf).max() <= bound and leaf.std() > bound / 2
    assert np.all(model.blocks[0].bn3.weight.numpy() == 1)  # no zero-init
    assert np.all(model.bn1.running_var.numpy() == 1)


def test_checkpoint_is_refused():
    with pytest.raises(NotImplementedError, match="no activation checkpointing"):
        jittor_impl.build(INPUTS, checkpoint=True)


def test_eval_logits_match_torch(torch_model, batch):
    images, _ = batch
    torch_model.eval()
    with torch.no_grad():
        expected = torch_model(torch.from_numpy(images)).numpy()
    model = jittor_twin(jittor_impl, INPUTS, torch_model)
    model.eval()
    with jt.no_grad():
        got = model(jt.array(images)).numpy()
    err = np.linalg.norm(got - expected) / np.linalg.norm(expected)
    print(f"eval logits relative error {err:.2e}")
    assert err <= 1e-4


def test_one_sgd_step_with_frozen_batchnorm_matches_torch(torch_model, batch):
    # BatchNorm on its running averages: every sample independent, the gradient well
    # conditioned, so the update itself is held to float32 accuracy.
    loss_err, update_err = step_errors(sgd_step(torch_model, batch, train=False))
    print(f"frozen BN: loss {loss_err:.2e}, update {update_err:.2e}")
    assert loss_err <= 1e-5
    assert update_err <= 1e-4


@pytest.fixture(scope="module")
def train_step(torch_model, batch):
    return sgd_step(torch_model, batch, train=True)


def test_one_train_mode_sgd_step_matches_torch_within_float32_conditioning(train_step):
    # Train-mode BN at initialisation makes the gradient ill-conditioned: torch float32
    # against torch float64 differs by ~4% (tests/test_flax_resnet50.py measures it), and
    # Jittor computes the batch variance in one pass (E[x^2] - E[x]^2). The loss is held to
    # 1e-5, the update to float32's noise band: a wrong layer or convention is off by O(1).
    loss_err, update_err = step_errors(train_step)
    print(f"train BN: loss {loss_err:.2e}, update {update_err:.2e}")
    assert loss_err <= 1e-5
    assert update_err <= 1e-1


def test_running_statistics_follow_torch_up_to_the_variance_convention(train_step):
    # Jittor updates running_var with the biased batch variance, torch with the unbiased one.
    t, j = train_step["torch"]["state"], train_step["jittor"]["state"]
    means = [n for n in t if n.endswith("running_mean")]
    assert relative_error({n: j[n] for n in means}, {n: t[n] for n in means}) <= 1e-4
    n = BATCH * 32 * 32  # stem BN: values per channel
    var_j, var_t = j["bn1.running_var"], t["bn1.running_var"]
    batch_var_j = (var_j - 0.9) / 0.1
    np.testing.assert_allclose(0.9 + 0.1 * batch_var_j * n / (n - 1), var_t, rtol=1e-4)
    assert not np.allclose(var_j, var_t, rtol=1e-6, atol=0)
