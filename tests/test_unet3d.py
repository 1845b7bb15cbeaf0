"""3D U-Net: one architecture in PyTorch and Flax (counts, outputs, an Adam step), and the
strategies computing the baseline's function in each backend."""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
pytest.importorskip("flax")
from flax.traverse_util import unflatten_dict  # noqa: E402

optax = pytest.importorskip("optax")

from membench.backends import BuildSpec, Unsupported  # noqa: E402
from membench.backends.jax_backend import JaxBackend  # noqa: E402
from membench.backends.torch_backend import TorchBackend  # noqa: E402
from membench.registry import preset, strategy  # noqa: E402
from models.unet3d import flax_impl, spec, torch_impl  # noqa: E402
from tests import session_probes as probe  # noqa: E402

from .parity import relative_error, torch_state, unet3d_torch_model  # noqa: E402
from .parity import tree_relative_error as rel  # noqa: E402

INPUTS = {"volume": 16, "num_classes": 3}
BATCH = 2


@pytest.fixture(scope="module")
def torch_model():
    return unet3d_torch_model(INPUTS)


@pytest.fixture(scope="module")
def batch():
    volumes, labels = spec.synthetic_batch(BATCH, INPUTS)
    return volumes, labels, flax_impl.input_layout(volumes)


def test_parameter_counts_are_equal_across_frameworks(torch_model):
    trainable, stats = spec.parameter_count()
    assert trainable == spec.TRAINABLE_PARAMETERS == 19_071_459
    assert stats == spec.BN_RUNNING_STATISTICS == 4_672
    assert sum(p.numel() for p in torch_model.parameters()) == 19_071_459
    running = sum(b.numel() for n, b in torch_model.named_buffers() if "running_" in n)
    assert running == 4_672
    model = flax_impl.build(INPUTS)
    x = jax.ShapeDtypeStruct((1, 16, 16, 16, 1), np.float32)
    shapes = jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x, train=False), x)
    count = lambda tree: sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(tree))  # noqa: E731
    assert count(shapes["params"]) == 19_071_459
    assert count(shapes["batch_stats"]) == 4_672
    converted = flax_impl.from_torch(torch_state(torch_model))
    assert jax.tree_util.tree_structure(converted) == jax.tree_util.tree_structure(dict(shapes))
    for a, b in zip(
        jax.tree_util.tree_leaves(converted), jax.tree_util.tree_leaves(shapes), strict=True
    ):
        assert a.shape == b.shape


def test_the_output_keeps_the_volume_and_labels_are_balanced(batch):
    volumes, labels, _ = batch
    assert volumes.shape == (BATCH, 1, 16, 16, 16) and labels.shape == (BATCH, 16, 16, 16)
    counts = np.bincount(labels.ravel(), minlength=3) / labels.size
    assert np.allclose(counts, 1 / 3, atol=0.01)
    with pytest.raises(ValueError, match="divide by 8"):
        spec.synthetic_batch(1, {"volume": 20})


def test_a_scan_of_slices_keeps_its_depth_height_and_width(torch_model):
    """C4's volumes are 128 slices of 512x512: a volume's sides given apart, each framework's
    model keeping them (a cube's side is the three alike)."""
    scan = {"depth": 8, "height": 16, "width": 24, "num_classes": 3}
    volumes, labels = spec.synthetic_batch(1, scan)
    assert volumes.shape == (1, 1, 8, 16, 24) and labels.shape == (1, 8, 16, 24)
    assert spec.input_elements(scan) == 3 * 8 * 16 * 24
    assert spec.input_elements(INPUTS) == 3 * 16**3
    with torch.no_grad():  # a copy: the module's fixture keeps its running statistics
        out = copy.deepcopy(torch_model).eval()(torch.from_numpy(volumes))
    assert out.shape == (1, 3, 8, 16, 24)
    model = flax_impl.build(scan)
    variables = flax_impl.init_variables(model, 1, scan)
    out = model.apply(variables, flax_impl.input_layout(volumes), train=False)
    assert out.shape == (1, 8, 16, 24, 3)
    with pytest.raises(ValueError, match="each divide by 8"):
        spec.synthetic_batch(1, {"depth": 8, "height": 12, "width": 8})


def test_eval_outputs_match_torch(torch_model, batch):
    volumes, _, ndhwc = batch
    torch_model.eval()
    with torch.no_grad():
        expected = torch_model(torch.from_numpy(volumes)).numpy()
    model = flax_impl.build(INPUTS)
    variables = flax_impl.from_torch(torch_state(torch_model))
    got = jax.jit(lambda v, x: model.apply(v, x, train=False))(variables, ndhwc)
    err = rel(np.moveaxis(np.asarray(got), -1, 1), expected)
    print(f"unet3d eval outputs relative error {err:.2e}")
    assert err <= 1e-4


def test_the_loss_matches_torch(batch):
    _, labels, _ = batch
    logits = np.random.default_rng(2).standard_normal((BATCH, 3, 16, 16, 16), dtype=np.float32)
    expected = torch_impl.loss_fn(torch.from_numpy(logits), torch.from_numpy(labels)).item()
    got = float(flax_impl.loss_fn(np.moveaxis(logits, 1, -1), labels))
    assert abs(got - expected) / expected <= 1e-5  # float32 sums over 8192 voxels: 1.3e-6


def jax_session(name: str, variables: dict | None = None):
    """A backend session on the smoke preset's batch (this file's), optionally given weights."""
    size = preset("smoke").size("unet3d")
    s = JaxBackend().build(BuildSpec("unet3d", strategy(name), size, BATCH))
    if variables is not None:
        s.params, s.batch_stats = variables["params"], variables["batch_stats"]
    return s


@pytest.fixture(scope="module")
def torch_weights(torch_model) -> dict:
    return flax_impl.from_torch(torch_state(torch_model))


@pytest.fixture(scope="module")
def jax_base(torch_weights):
    return jax_session("baseline", torch_weights)


@pytest.fixture(scope="module")
def jax_frozen_grads(jax_base):
    # BatchNorm on its running statistics, as for ResNet-50: train-mode statistics at init
    # make the gradient float32-ill-conditioned (see tests/test_flax_resnet50.py).
    return probe.gradients(jax_base, train_bn=False)


def test_the_backends_batch_is_this_files(batch, jax_base):
    np.testing.assert_array_equal(np.asarray(probe.whole_batch(jax_base)[0]), batch[2])
    np.testing.assert_array_equal(np.asarray(probe.whole_batch(jax_base)[1]), batch[1])


def test_one_adam_step_matches_torch(torch_model, batch, torch_weights, jax_frozen_grads):
    # (the loss and the outputs are compared on their own above)
    volumes, labels, _ = batch
    model = torch_impl.build(INPUTS)
    model.load_state_dict(torch_model.state_dict())
    model.eval()
    opt = torch_impl.make_optimizer(model.parameters())
    torch_impl.loss_fn(model(torch.from_numpy(volumes)), torch.from_numpy(labels)).backward()
    opt.step()

    before = torch_weights["params"]
    tx = flax_impl.make_optimizer()
    grads = unflatten_dict(jax_frozen_grads, sep="/")  # Session.gradients: paths joined by /
    updates, _ = tx.update(grads, tx.init(before), before)
    after_f = optax.apply_updates(before, updates)
    after_t = flax_impl.from_torch(torch_state(model))["params"]

    delta = lambda a: jax.tree_util.tree_map(np.subtract, a, before)  # noqa: E731
    update_err, params_err = rel(delta(after_f), delta(after_t)), rel(after_f, after_t)
    print(f"unet3d Adam step: update {update_err:.1e}, params {params_err:.1e}")
    assert update_err <= 1e-3 and params_err <= 1e-5  # measured 5.2e-5 and 2.2e-6


def test_train_mode_loss_matches_torch(torch_model, batch):
    volumes, labels, ndhwc = batch
    model = torch_impl.build(INPUTS)
    model.load_state_dict(torch_model.state_dict())
    model.train()
    with torch.no_grad():
        expected = torch_impl.loss_fn(model(torch.from_numpy(volumes)), torch.from_numpy(labels))
    variables = flax_impl.from_torch(torch_state(torch_model))
    fmodel = flax_impl.build(INPUTS)
    logits, _ = jax.jit(lambda v, x: fmodel.apply(v, x, train=True, mutable=["batch_stats"]))(
        variables, ndhwc
    )
    assert abs(float(flax_impl.loss_fn(logits, labels)) - expected.item()) / expected.item() <= 1e-5


# -- strategies, through the backends ----------------------------------------------------------


def torch_session(name: str, batch: int = BATCH):
    size = preset("smoke").size("unet3d")
    s = TorchBackend().build(BuildSpec("unet3d", strategy(name), size, batch))
    s.model.eval()  # BatchNorm from running statistics: samples independent
    return s


@pytest.fixture(scope="module")
def torch_baseline():
    return probe.gradients(torch_session("baseline"))


@pytest.mark.parametrize("name", ["checkpoint", "accumulate-2"])
def test_torch_strategies_give_the_baseline_gradients(name, torch_baseline):
    err = relative_error(probe.gradients(torch_session(name)), torch_baseline)
    print(f"torch unet3d {name} gradients relative error {err:.2e}")
    assert err <= 1e-5


@pytest.mark.parametrize("name", ["checkpoint", "accumulate-2"])
def test_jax_strategies_give_the_baseline_gradients(name, torch_weights, jax_frozen_grads):
    err = rel(probe.gradients(jax_session(name, torch_weights), train_bn=False), jax_frozen_grads)
    print(f"jax unet3d {name} gradients relative error {err:.2e}")
    assert err <= 1e-5


def test_torch_checkpoint_in_train_mode_matches_too():
    base = TorchBackend().build(
        BuildSpec("unet3d", strategy("baseline"), preset("smoke").size("unet3d"), BATCH)
    )
    ckpt = TorchBackend().build(
        BuildSpec("unet3d", strategy("checkpoint"), preset("smoke").size("unet3d"), BATCH)
    )
    assert relative_error(probe.gradients(ckpt), probe.gradients(base)) <= 1e-5


def test_the_attention_knob_does_not_apply():
    for backend in (TorchBackend(), JaxBackend()):
        size = preset("smoke").size("unet3d")
        with pytest.raises(Unsupported, match="no attention layer"):
            backend.build(BuildSpec("unet3d", strategy("fused-attention"), size, BATCH))
