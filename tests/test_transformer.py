"""GPT-2-style Transformer: one architecture in PyTorch and Flax (counts, outputs, an AdamW
step), plain and fused attention equal, and the strategies computing the baseline's function."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
pytest.importorskip("flax")
optax = pytest.importorskip("optax")

from membench.backends import BuildSpec  # noqa: E402
from membench.backends.jax_backend import JaxBackend  # noqa: E402
from membench.backends.torch_backend import TorchBackend  # noqa: E402
from membench.registry import TRANSFORMER_TINY, preset, strategy  # noqa: E402
from models.transformer import flax_impl, spec, torch_impl  # noqa: E402
from tests import session_probes as probe  # noqa: E402

from .parity import relative_error, torch_state, transformer_torch_model  # noqa: E402
from .parity import tree_relative_error as rel  # noqa: E402

INPUTS = TRANSFORMER_TINY  # the smoke preset's configuration
BATCH = 4


def count(tree) -> int:
    return sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(tree))


@pytest.fixture(scope="module")
def torch_model():
    return transformer_torch_model(INPUTS)


@pytest.fixture(scope="module")
def batch():
    return spec.synthetic_batch(BATCH, INPUTS)


def test_gpt2_small_has_124_439_808_parameters_in_every_framework():
    assert spec.parameter_count(spec.GPT2_SMALL) == spec.GPT2_SMALL_PARAMETERS == 124_439_808
    gpu = preset("gpu").size("transformer").inputs
    assert spec.config(gpu) == spec.GPT2_SMALL and spec.seq_len(gpu) == 1024
    with torch.device("meta"):  # shapes only: no 500 MB of weights
        model = torch_impl.build(gpu)
    assert sum(p.numel() for p in model.parameters()) == 124_439_808  # tied: counted once
    flax_model = flax_impl.build(gpu)
    tokens = jax.ShapeDtypeStruct((1, 1024), np.int32)
    shapes = jax.eval_shape(lambda t: flax_model.init(jax.random.PRNGKey(0), t), tokens)
    assert count(shapes["params"]) == 124_439_808


@pytest.mark.parametrize("name", ["smoke", "cpu"])
def test_shrunk_configurations_match_across_frameworks(name, torch_model):
    inputs = preset(name).size("transformer").inputs
    expected = spec.parameter_count(spec.config(inputs))
    with torch.device("meta"):
        assert sum(p.numel() for p in torch_impl.build(inputs).parameters()) == expected
    tokens = jax.ShapeDtypeStruct((1, spec.seq_len(inputs)), np.int32)
    model = flax_impl.build(inputs)
    shapes = jax.eval_shape(lambda t: model.init(jax.random.PRNGKey(0), t), tokens)
    assert count(shapes["params"]) == expected
    if name == "smoke":
        converted = flax_impl.from_torch(torch_state(torch_model))
        assert jax.tree_util.tree_structure(converted) == jax.tree_util.tree_structure(dict(shapes))
        for a, b in zip(
            jax.tree_util.tree_leaves(converted), jax.tree_util.tree_leaves(shapes), strict=True
        ):
            assert a.shape == b.shape


def test_the_output_projection_is_the_token_embedding():
    model = torch_impl.build(INPUTS)
    assert "lm_head.weight" not in model.state_dict()
    tokens = torch.zeros(1, 4, dtype=torch.long)
    with torch.no_grad():
        model.wte.weight.mul_(2)  # a change to the embedding changes the logits' projection
        h = model.ln_f(model.blocks[1](model.blocks[0](model.wte(tokens) + model.wpe.weight[:4])))
        assert torch.allclose(model(tokens), h @ model.wte.weight.T, atol=1e-6)


@pytest.mark.parametrize("attention", ["plain", "fused"])
def test_eval_logits_match_torch(attention, torch_model, batch):
    tokens, _ = batch
    model = torch_impl.build(INPUTS, attention=attention)
    model.load_state_dict(torch_model.state_dict())
    with torch.no_grad():
        expected = model(torch.from_numpy(tokens)).numpy()
    fmodel = flax_impl.build(INPUTS, attention=attention)
    got = jax.jit(fmodel.apply)(flax_impl.from_torch(torch_state(torch_model)), tokens)
    err = rel(got, expected)
    print(f"transformer {attention} eval logits relative error {err:.2e}")
    assert err <= 1e-4


def test_attention_is_causal(torch_model, batch):
    tokens, _ = batch
    changed = tokens.copy()
    changed[:, -1] = (changed[:, -1] + 1) % INPUTS["vocab_size"]
    variables = flax_impl.from_torch(torch_state(torch_model))
    for attention in ("plain", "fused"):
        with torch.no_grad():
            model = torch_impl.build(INPUTS, attention=attention)
            model.load_state_dict(torch_model.state_dict())
            a, b = model(torch.from_numpy(tokens)), model(torch.from_numpy(changed))
        assert torch.equal(a[:, :-1], b[:, :-1]) and not torch.equal(a[:, -1], b[:, -1])
        fmodel = flax_impl.build(INPUTS, attention=attention)
        fa, fb = fmodel.apply(variables, tokens), fmodel.apply(variables, changed)
        np.testing.assert_allclose(fa[:, :-1], fb[:, :-1], rtol=0, atol=1e-6)
        assert not np.allclose(fa[:, -1], fb[:, -1])


def test_one_adamw_step_matches_torch(torch_model, batch):
    tokens, targets = batch
    model = torch_impl.build(INPUTS)
    model.load_state_dict(torch_model.state_dict())
    opt = torch_impl.make_optimizer(model.parameters())
    loss_t = torch_impl.loss_fn(model(torch.from_numpy(tokens)), torch.from_numpy(targets))
    loss_t.backward()
    opt.step()

    before = flax_impl.from_torch(torch_state(torch_model))["params"]
    fmodel = flax_impl.build(INPUTS)

    def loss(params):
        return flax_impl.loss_fn(fmodel.apply({"params": params}, tokens), targets)

    loss_f, grads = jax.jit(jax.value_and_grad(loss))(before)
    tx = flax_impl.make_optimizer()
    updates, _ = tx.update(grads, tx.init(before), before)
    after_f = optax.apply_updates(before, updates)
    after_t = flax_impl.from_torch(torch_state(model))["params"]

    delta = lambda a: jax.tree_util.tree_map(np.subtract, a, before)  # noqa: E731
    loss_err = abs(float(loss_f) - loss_t.item()) / loss_t.item()
    update_err, params_err = rel(delta(after_f), delta(after_t)), rel(after_f, after_t)
    print(f"AdamW step: loss {loss_err:.1e}, update {update_err:.1e}, params {params_err:.1e}")
    assert loss_err <= 1e-5 and update_err <= 1e-3 and params_err <= 1e-5


def test_weight_decay_spares_biases_and_layernorms():
    model = torch_impl.build(INPUTS)
    decayed = {id(p) for g in torch_impl.make_optimizer(model.parameters()).param_groups
               if g["weight_decay"] > 0 for p in g["params"]}  # fmt: skip
    names = {n for n, p in model.named_parameters() if id(p) in decayed}
    assert "wte.weight" in names and "blocks.0.mlp.fc.weight" in names
    assert not any(n.endswith("bias") or ".ln" in n or n.startswith("ln_f") for n in names)


# -- strategies, through the backends ----------------------------------------------------------


def torch_session(name: str):
    size = preset("smoke").size("transformer")
    return TorchBackend().build(BuildSpec("transformer", strategy(name), size, BATCH))


def jax_session(name: str):
    size = preset("smoke").size("transformer")
    return JaxBackend().build(BuildSpec("transformer", strategy(name), size, BATCH))


@pytest.fixture(scope="module")
def torch_baseline():
    return probe.gradients(torch_session("baseline"))


@pytest.fixture(scope="module")
def jax_baseline():
    return probe.gradients(jax_session("baseline"))


@pytest.mark.parametrize(
    ("name", "tolerance"),
    [
        ("checkpoint", 1e-6),
        ("accumulate-2", 1e-5),
        ("accumulate-4", 1e-5),
        ("fused-attention", 1e-5),
    ],
)
def test_torch_strategies_give_the_baseline_gradients(name, tolerance, torch_baseline):
    s = torch_session(name)
    err = relative_error(probe.gradients(s), torch_baseline)
    print(f"torch transformer {name} gradients relative error {err:.2e}")
    assert err <= tolerance
    if name == "fused-attention":
        assert s.notes()["attention"].startswith("torch.nn.functional.scaled_dot_product")


@pytest.mark.parametrize(
    ("name", "tolerance"),
    [
        ("checkpoint", 1e-6),
        ("accumulate-2", 1e-5),
        ("accumulate-4", 1e-5),
        ("fused-attention", 1e-5),
    ],
)
def test_jax_strategies_give_the_baseline_gradients(name, tolerance, jax_baseline):
    s = jax_session(name)
    err = rel(probe.gradients(s), jax_baseline)
    print(f"jax transformer {name} gradients relative error {err:.2e}")
    assert err <= tolerance


def test_amp_bf16_and_half_inference_stay_near_float32():
    ref = torch_session("baseline")
    with torch.no_grad():
        expected = ref.model(ref.batches[0][0])
        amp = torch_session("amp-bf16")
        with amp.autocast:
            got = amp.model(amp.batches[0][0])
        assert rel(got.float().numpy(), expected.numpy()) <= 5e-2
        half = torch_session("infer-half")
        assert half.batches[0][0].dtype == torch.long  # token ids are not cast
        assert rel(half.model(half.batches[0][0]).float().numpy(), expected.numpy()) <= 1e-2
    base, half_j = jax_session("baseline"), jax_session("infer-half")
    expected_j = np.asarray(
        base.computation.infer_step(base.params, base.batch_stats, probe.whole_batch(base)[0])
    )
    got_j = np.asarray(
        half_j.computation.infer_step(
            half_j.params, half_j.batch_stats, probe.whole_batch(half_j)[0]
        ),
        np.float32,
    )
    assert probe.whole_batch(half_j)[0].dtype == np.int32 and rel(got_j, expected_j) <= 1e-2


@pytest.mark.parametrize("name", ["amp-fp16", "accumulate-2"])
def test_a_jax_step_runs_again_on_its_own_output(name):
    s = jax_session(name)
    s.step()
    s.step()
    metrics = s.static_metrics()
    assert metrics["trainable_parameters"] == spec.parameter_count(spec.config(INPUTS))
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(s.params))
