"""JAX backend: every strategy computes the baseline's function; the step is used as JAX's
experts use it (one jitted, donating step; XLA's own memory view recorded)."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flax")

from membench.backends import BuildSpec, Unsupported  # noqa: E402
from membench.backends.jax_backend import JaxBackend  # noqa: E402
from membench.registry import WorkloadSize, preset, strategy  # noqa: E402
from tests import session_probes as probe  # noqa: E402

from .parity import tree_relative_error  # noqa: E402

BATCH = 4


def session(name: str, batch: int = BATCH, image_size: int | None = None):
    size = preset("smoke").size("resnet50")
    if image_size:
        size = WorkloadSize(size.batch_sizes, {**size.inputs, "image_size": image_size})
    return JaxBackend().build(BuildSpec("resnet50", strategy(name), size, batch))


@pytest.fixture(scope="module")
def frozen_baseline():
    # BatchNorm from running averages: samples independent, the problem well conditioned
    # (train-mode BN at initialisation is chaotic: see the PyTorch tests).
    return probe.gradients(session("baseline"), train_bn=False)


def test_checkpoint_gives_the_baseline_gradients(frozen_baseline):
    assert (
        tree_relative_error(probe.gradients(session("checkpoint"), train_bn=False), frozen_baseline)
        <= 1e-5
    )


@pytest.mark.parametrize(
    "name", ["accumulate-2", "accumulate-4", "accumulate-2-scan", "accumulate-4-scan"]
)
def test_accumulation_gives_the_full_batch_gradients(name, frozen_baseline):
    assert (
        tree_relative_error(probe.gradients(session(name), train_bn=False), frozen_baseline) <= 1e-5
    )


@pytest.fixture(scope="module")
def frozen_baseline_update():
    return probe.jax_update(session("baseline"), train_bn=False)


@pytest.mark.parametrize("name", ["accumulate-2", "accumulate-4", "accumulate-4-scan"])
def test_an_accumulated_step_is_the_full_batch_update(name, frozen_baseline_update):
    s = session(name)
    update = probe.jax_update(s, train_bn=False)
    assert tree_relative_error(update, frozen_baseline_update) <= 1e-5
    assert max(float(np.abs(u).max()) for u in jax.tree_util.tree_leaves(update)) > 0


def test_multisteps_runs_k_jitted_micro_steps_and_one_update():
    s = session("accumulate-4")
    assert s.multi_steps and [x.shape[0] for x, _ in s.batches] == [1, 1, 1, 1]
    s.step()
    assert int(s.opt_state.mini_step) == 0  # the 4th call applied the update and reset
    assert int(s.opt_state.gradient_step) == 1  # one optimizer update per step
    micro = s.static_metrics()
    base = session("baseline")
    base.step()
    # XLA's view is the compiled micro-step: a quarter of the batch's work. (Its temp buffers
    # are not smaller at 64x64: there parameter-sized buffers outweigh the activations.)
    assert micro["xla_flops"] < 0.3 * base.static_metrics()["xla_flops"]
    assert "MultiSteps" in s.notes()["accumulate"] and s.notes()["micro_batch"] == 1
    assert "lax.scan" in session("accumulate-4-scan").notes()["accumulate"]


def test_amp_bf16_gradients_are_within_bf16_tolerance():
    ref = probe.gradients(session("baseline", image_size=224), train_bn=False)
    amp = session("amp-bf16", image_size=224)
    assert jax.tree_util.tree_leaves(amp.params)[0].dtype == np.float32  # fp32 master weights
    assert 0 < tree_relative_error(probe.gradients(amp, train_bn=False), ref) <= 5e-2


def test_amp_fp16_with_dynamic_loss_scaling(frozen_baseline):
    s = session("amp-fp16")
    err = tree_relative_error(probe.gradients(s, train_bn=False), frozen_baseline)
    assert float(s.dynamic_scale.scale) < 2.0**15  # the scale backed off from its start
    # Flax's dtype=float16 puts every layer in float16, BatchNorm included (torch.autocast
    # keeps it float32): 7.4e-2 measured on this machine kind's Xeon
    assert 0 < err <= 1e-1


def test_infer_strategies_compute_the_eval_logits():
    base = session("baseline")
    expected = np.asarray(
        base.computation.infer_step(base.params, base.batch_stats, probe.whole_batch(base)[0])
    )
    half = session("infer-half")
    got = np.asarray(
        half.computation.infer_step(half.params, half.batch_stats, probe.whole_batch(half)[0]),
        dtype=np.float32,
    )
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) <= 1e-2
    infer = session("infer")
    assert infer.opt_state is None
    infer.step()  # runs, compiled, without an optimizer


def test_the_step_donates_its_state_and_records_xla_analysis():
    s = session("baseline")
    old = jax.tree_util.tree_leaves(s.params)[0]
    s.step()
    assert old.is_deleted()  # parameters were donated to the step, not copied
    metrics = s.static_metrics()
    assert metrics["trainable_parameters"] == 25_557_032
    assert metrics["xla_temp_bytes"] > 0 and metrics["xla_flops"] > 0
    assert metrics["xla_alias_bytes"] >= metrics["parameter_bytes"]  # donation aliases them
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(s.params))


@pytest.mark.parametrize("name", ["amp-fp16", "accumulate-2", "accumulate-2-scan"])
def test_the_step_runs_again_on_its_own_output(name):
    # The compiled step is called with the state it returned: its structure must not change.
    s = session(name)
    s.step()
    s.step()
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(s.params))


def test_cells_jax_does_not_run_say_why():
    with pytest.raises(Unsupported, match="always runs the step compiled"):
        session("compile")
    with pytest.raises(Unsupported, match="is a PyTorch CUDA setting"):
        session("expandable-segments")
    with pytest.raises(Unsupported, match="no user setting turns fusion off"):
        session("no-fuse")
    for name in ("managed-allocator", "save-mem"):
        with pytest.raises(Unsupported, match="is a Jittor setting"):
            session(name)
    with pytest.raises(Unsupported, match="does not split into 4"):
        session("accumulate-4", batch=2)
    with pytest.raises(Unsupported, match="blocking after each only adds waiting"):
        session("accumulate-2-sync")
